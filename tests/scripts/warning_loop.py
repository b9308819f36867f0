"""A training loop that warns at one place every iteration (Python shows such a warning once) until a
file exists (argument: its path, e.g. the profiler's rank metadata, written by its first flush),
then ITERATIONS more."""
import os
import sys
import time
import warnings

import torch

WAIT_FOR, ITERATIONS = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 20
torch.manual_seed(0)
model = torch.nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
x, y = torch.randn(64, 16), torch.randn(64, 1)
deadline = time.monotonic() + 120
left = ITERATIONS
while left > 0:
    warnings.warn("the learning rate is only a guess", UserWarning)
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    if os.path.exists(WAIT_FOR) or time.monotonic() > deadline:
        left -= 1
    else:
        time.sleep(0.01)
print("warning-loop: done")
