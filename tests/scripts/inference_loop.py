"""Inference only: module calls under no_grad for SECONDS, no backward pass and no optimizer; a batch
every few milliseconds, as requests come to a server (a tight loop would make a window of a million
operators, which only slows the tests)."""
import sys
import time

import torch

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).eval()
calls = 0
end = time.monotonic() + SECONDS
with torch.no_grad():
    while time.monotonic() < end:
        model(torch.randn(32, 16))
        calls += 1
        time.sleep(0.005)
print(f"inference: {calls} batches")
