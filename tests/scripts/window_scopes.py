"""A training job that counts torch profiler scopes crossing from one capture window into the next.

torch calls a ``record_function`` scope's end callback with the context of the profiler that was
running when the scope opened; if another profiler started in the meantime, it writes into the
stopped one's freed events (heap corruption). This job wraps ``record_function`` (which the
optimizer and the DataLoader use) and ``torch.profiler.profile.start/stop`` to count such scopes,
then prints ``crossings N windows M steps S``. Run it zero-code (``OTEL_PROFILER_ENABLED=true``);
``--closure`` uses LBFGS (forward and backward inside ``Optimizer.step``'s scope).
"""

from __future__ import annotations

import argparse

import torch
import torch.autograd.profiler as autograd_profiler
import torch.profiler as tp
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

state = {"generation": 0, "running": False, "crossings": 0, "windows": 0}
_start, _stop = tp.profile.start, tp.profile.stop


def start(self):
    _start(self)
    state["generation"] += 1
    state["windows"] += 1
    state["running"] = True


def stop(self):
    state["running"] = False
    _stop(self)


tp.profile.start, tp.profile.stop = start, stop


class CountedScope(autograd_profiler.record_function):
    def __enter__(self):
        self.opened_under = state["generation"] if state["running"] else None
        return super().__enter__()

    def __exit__(self, *exc):
        if self.opened_under is not None and state["running"] and state["generation"] != self.opened_under:
            state["crossings"] += 1
        return super().__exit__(*exc)


autograd_profiler.record_function = CountedScope


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--closure", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    x = torch.randn(256, 16)
    y = x[:, :2].sum(dim=1, keepdim=True)
    loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
    loss_fn = nn.MSELoss()
    optimizer = (torch.optim.LBFGS(model.parameters(), max_iter=2) if args.closure
                 else torch.optim.SGD(model.parameters(), lr=0.01))
    steps = 0
    for _ in range(args.epochs):
        for inputs, targets in loader:
            def closure():
                optimizer.zero_grad()
                loss = loss_fn(model(inputs), targets)
                loss.backward()
                return loss

            if args.closure:
                optimizer.step(closure)
            else:
                closure()
                optimizer.step()
            steps += 1
    print(f"crossings {state['crossings']} windows {state['windows']} steps {steps}", flush=True)


if __name__ == "__main__":
    main()
