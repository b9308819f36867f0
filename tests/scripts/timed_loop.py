"""A loop that times each of its ITERATIONS iterations itself, as users do (from before the forward
pass to after the optimizer step), and writes the times in seconds to the JSON file OUT.
Usage: timed_loop.py OUT [ITERATIONS]."""
import json
import sys
import time

import torch

OUT = sys.argv[1]
ITERATIONS = int(sys.argv[2]) if len(sys.argv) > 2 else 12
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
x, y = torch.randn(512, 256), torch.randn(512, 1)
with torch.no_grad():
    model(x)  # an evaluation pass before training (gradients off): not a step
time.sleep(0.2)  # set-up between them (a data loader's start): not in the first step either
times = []
for i in range(ITERATIONS):
    start = time.perf_counter()
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    times.append(time.perf_counter() - start)
with open(OUT, "w") as f:
    json.dump(times, f)
print(f"timed-loop: {ITERATIONS} iterations")
