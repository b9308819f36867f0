"""A small optimizer training job for the exporter tests: STEPS optimizer steps, then (when the file
named by ``JOB_HOLD_FILE`` is expected) waits up to 120 s for it so a scraper can read /metrics."""
import os
import sys
import time

import torch

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 12
torch.manual_seed(0)
model = torch.nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(STEPS):
    model(torch.randn(8, 16)).pow(2).mean().backward()
    optimizer.step()
    optimizer.zero_grad()
print(f"job: {STEPS} steps", flush=True)
hold = os.environ.get("JOB_HOLD_FILE")
if hold:
    end = time.monotonic() + 120
    while not os.path.exists(hold) and time.monotonic() < end:
        time.sleep(0.1)
