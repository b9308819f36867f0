"""A small real PyTorch training loop to try the profiler on: an MLP learning a synthetic regression.

Runs in a few seconds on a CPU. The data is made here (no download); a DataLoader feeds it; two
annotations mark the forward and backward passes. Profile it with no code change:

    otel-profiler run -- python examples/train_mlp.py

or add ``--cpu-ops`` to see PyTorch's operators too. Works unprofiled as well.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

try:  # annotations are optional: the script runs without otel-profiler installed
    from otel_profiler import annotate
except ImportError:  # pragma: no cover
    import contextlib

    def annotate(name, **attributes):
        return contextlib.nullcontext()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--samples", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    args = parser.parse_args()

    torch.manual_seed(0)
    x = torch.randn(args.samples, 64)
    y = (x[:, :8].sum(dim=1, keepdim=True) + 0.1 * torch.randn(args.samples, 1))
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True,
                        num_workers=args.workers)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.MSELoss()

    for epoch in range(args.epochs):
        total = 0.0
        for inputs, targets in loader:
            with annotate("forward", epoch=epoch):
                loss = loss_fn(model(inputs), targets)
            with annotate("backward"):
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
            optimizer.step()
            total += loss.item() * len(inputs)
        print(f"epoch {epoch}: loss {total / args.samples:.4f}")


if __name__ == "__main__":
    main()
