"""Hogwild training in the style of pytorch/examples' mnist_hogwild: PROCESSES torch.multiprocessing
processes (START_METHOD: fork or spawn) each run STEPS optimizer steps on one model in shared memory,
with a DataLoader of two workers each; the parent only starts and joins them, then evaluates.
Usage: hogwild.py START_METHOD [PROCESSES] [STEPS]."""
import sys

import torch
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, TensorDataset


def train(rank: int, model: torch.nn.Module, steps: int) -> None:
    torch.manual_seed(rank)
    data = TensorDataset(torch.randn(steps * 8, 16), torch.randn(steps * 8, 1))
    loader = DataLoader(data, batch_size=8, num_workers=2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    print(f"trainer {rank} done", flush=True)


if __name__ == "__main__":
    method = sys.argv[1]
    processes = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    mp.set_start_method(method)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    model.share_memory()
    workers = [mp.Process(target=train, args=(rank, model, steps)) for rank in range(processes)]
    for p in workers:
        p.start()
    for p in workers:
        p.join()
    with torch.no_grad():
        model(torch.randn(4, 16))
    print("exit codes", [p.exitcode for p in workers])
