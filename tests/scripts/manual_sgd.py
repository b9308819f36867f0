"""Training with hand-written SGD updates (no torch.optim), as in many tutorials: ITERATIONS backward passes."""
import sys

import torch

ITERATIONS = int(sys.argv[1]) if len(sys.argv) > 1 else 20
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
x, y = torch.randn(256, 16), torch.randn(256, 1)
for i in range(ITERATIONS):
    batch = slice(16 * (i % 16), 16 * (i % 16) + 16)
    loss = torch.nn.functional.mse_loss(model(x[batch]), y[batch])
    model.zero_grad()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(p.grad, alpha=-0.05)
print(f"manual-sgd: {ITERATIONS} iterations, loss {loss.item():.4f}")
