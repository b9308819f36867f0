"""A training loop of about 20 ms steps that runs until the file named by its first argument exists,
then trains ten steps more and prints how many steps it ran (a job that a test can capture while it
runs). A second argument caps the steps (default 6000: two minutes)."""
import os
import sys
import time

import torch

stop_file = sys.argv[1]
cap = int(sys.argv[2]) if len(sys.argv) > 2 else 6000
torch.manual_seed(int(os.environ.get("RANK", "0")))
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 32), torch.randn(64, 1)
steps, extra = 0, None
while steps < cap and (extra is None or extra > 0):
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    time.sleep(0.02)
    steps += 1
    if extra is None and os.path.exists(stop_file):
        extra = 10
    elif extra is not None:
        extra -= 1
print(f"steps {steps}")
