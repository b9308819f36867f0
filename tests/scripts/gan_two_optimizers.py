"""A GAN: a discriminator step and a generator step in every iteration (ITERATIONS iterations)."""
import sys

import torch

ITERATIONS = int(sys.argv[1]) if len(sys.argv) > 1 else 12
torch.manual_seed(0)
generator = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
discriminator = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
opt_g = torch.optim.Adam(generator.parameters(), lr=1e-3)
opt_d = torch.optim.Adam(discriminator.parameters(), lr=1e-3)
bce = torch.nn.BCEWithLogitsLoss()
real = torch.randn(32, 4) * 0.5 + 1
ones, zeros = torch.ones(32, 1), torch.zeros(32, 1)
for _ in range(ITERATIONS):
    fake = generator(torch.randn(32, 8))
    opt_d.zero_grad()
    (bce(discriminator(real), ones) + bce(discriminator(fake.detach()), zeros)).backward()
    opt_d.step()
    opt_g.zero_grad()
    bce(discriminator(fake), ones).backward()
    opt_g.step()
print(f"gan: {ITERATIONS} iterations")
