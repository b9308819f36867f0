"""A training loop (ITERATIONS steps) while a second thread writes numbered lines to stderr, half
through sys.stderr and half straight to descriptor 2; the main thread writes one after each step."""
import os
import sys
import threading

import torch

ITERATIONS = int(sys.argv[1]) if len(sys.argv) > 1 else 40
done = threading.Event()


def chatter() -> None:
    n = 0
    while not done.is_set() or n < 200:
        if n % 2:
            sys.stderr.write(f"thread-line {n}\n")  # one write per line: lines of two threads
            sys.stderr.flush()  # never share a line
        else:
            os.write(2, f"thread-line {n}\n".encode())
        n += 1
        done.wait(0.001)
    sys.stderr.write(f"thread-lines {n}\n")


writer = threading.Thread(target=chatter)
writer.start()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(128, 32), torch.randn(128, 1)
for i in range(ITERATIONS):
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
    sys.stderr.write(f"main-line {i}\n")
    sys.stderr.flush()
done.set()
writer.join()
