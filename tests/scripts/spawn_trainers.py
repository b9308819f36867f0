"""``torch.multiprocessing.spawn`` of PROCESSES trainers without a process group, each with its own
model and STEPS optimizer steps. Usage: spawn_trainers.py [PROCESSES] [STEPS]."""
import sys

import torch
import torch.multiprocessing as mp


def train(index: int, steps: int) -> None:
    torch.manual_seed(index)
    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(steps):
        optimizer.zero_grad()
        model(torch.randn(8, 16)).pow(2).mean().backward()
        optimizer.step()
    print(f"trainer {index} done", flush=True)


if __name__ == "__main__":
    processes = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    mp.spawn(train, args=(steps,), nprocs=processes)
