"""LBFGS with a closure: several forward/backward passes inside each optimizer step (ITERATIONS steps)."""
import sys

import torch

ITERATIONS = int(sys.argv[1]) if len(sys.argv) > 1 else 12
torch.manual_seed(0)
model = torch.nn.Linear(16, 1)
x, y = torch.randn(128, 16), torch.randn(128, 1)
optimizer = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4)
passes = 0


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
