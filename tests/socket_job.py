"""A profiled CPU training job that writes a checkpoint every step, for the socket tests.

``python tests/socket_job.py OUT [--exit-code N]``, profiled without code changes (the caller sets
``OTEL_PROFILER_ENABLED`` and the bootstrap on ``PYTHONPATH``, e.g. with ``fault_kit.job_env``):
trains a small MLP on CPU and after every step saves the model (``torch.save`` to OUT/ckpt.pt) and
the step count (OUT/progress, written aside, then renamed): the job's own file operations, which
fail once its file descriptors run out. When OUT/fork appears it starts a DataLoader with two
forked workers, each writing its process id to OUT/worker-PID, and draws a batch from it every step.
It stops once OUT/stop exists and exits with ``--exit-code``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch
from torch import nn


class _Numbers(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 1 << 20

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(0.01)
        return torch.full((64,), float(index % 7))


def _mark_worker(out: str) -> None:
    with open(os.path.join(out, f"worker-{os.getpid()}"), "w") as f:
        f.write("up")


def _loader(out: str):
    loader = torch.utils.data.DataLoader(_Numbers(), batch_size=4, num_workers=2,
                                         multiprocessing_context="fork",
                                         worker_init_fn=lambda _: _mark_worker(out))
    return iter(loader)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--exit-code", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(256, 64), torch.randn(256, 1)
    batches, step = None, 0
    while not os.path.exists(os.path.join(args.out, "stop")):
        if batches is None and os.path.exists(os.path.join(args.out, "fork")):
            batches = _loader(args.out)
        if batches is not None:
            x[:4] = next(batches)
        optimizer.zero_grad(set_to_none=True)
        (model(x) - y).pow(2).mean().backward()
        optimizer.step()
        step += 1
        torch.save(model.state_dict(), os.path.join(args.out, "ckpt.pt"))
        with open(os.path.join(args.out, "progress.tmp"), "w") as f:
            f.write(str(step))
        os.replace(os.path.join(args.out, "progress.tmp"), os.path.join(args.out, "progress"))
        time.sleep(0.02)
    sys.stdout.flush()
    sys.exit(args.exit_code)


if __name__ == "__main__":
    main()
