"""LBFGS with a closure: several forward/backward passes inside each optimizer step (ITERATIONS steps).
A second argument: seconds of evaluation (forward passes only) before the first step."""
import sys
import time

import torch

ITERATIONS = int(sys.argv[1]) if len(sys.argv) > 1 else 12
torch.manual_seed(0)
model = torch.nn.Linear(16, 1)
x, y = torch.randn(128, 16), torch.randn(128, 1)
optimizer = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4)
passes = 0
WARM_UP_S = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
until = time.monotonic() + WARM_UP_S
while time.monotonic() < until:
    with torch.no_grad():
        model(x)
    time.sleep(0.05)


def closure():
    global passes
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    passes += 1
    return loss


for _ in range(ITERATIONS):
    optimizer.step(closure)
print(f"lbfgs: {ITERATIONS} steps, {passes} backward passes")
