"""A loop that marks its steps with otel_profiler.step() after an optimizer step (ITERATIONS)."""
import sys

import torch

import otel_profiler

ITERATIONS = int(sys.argv[1]) if len(sys.argv) > 1 else 12
torch.manual_seed(0)
model = torch.nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
x, y = torch.randn(64, 16), torch.randn(64, 1)
for _ in range(ITERATIONS):
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    otel_profiler.step()
print(f"step-beside-optimizer: {ITERATIONS} iterations")
