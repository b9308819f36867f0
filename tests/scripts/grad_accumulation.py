"""Gradient accumulation: ACCUMULATE backward passes before each of ITERATIONS optimizer steps."""
import sys

import torch

ITERATIONS = int(sys.argv[1]) if len(sys.argv) > 1 else 12
ACCUMULATE = int(sys.argv[2]) if len(sys.argv) > 2 else 4
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
for _ in range(ITERATIONS):
    for _ in range(ACCUMULATE):
        loss = model(torch.randn(8, 16)).pow(2).mean() / ACCUMULATE
        loss.backward()
    optimizer.step()
    optimizer.zero_grad()
print(f"accumulation: {ITERATIONS} steps of {ACCUMULATE} micro-batches")
