"""Always-on capture: a one-thread CPU training loop capturing one step in 100 with operators recorded
(``OTEL_PROFILER_EVERY_STEPS=100``, ``OTEL_PROFILER_WINDOW_STEPS=1``, ``OTEL_PROFILER_ACTIVITIES=
gpu,cpu_op``), beside the same loop unprofiled, in one process: blocks of ``--steps`` steps
alternate, so machine noise hits both alike.

Reports the wall-time ratio (profiled / plain, median of the blocks' totals) and what each window cost
the training thread, from the per-step times around the captured step ``k`` against the median
uncaptured step: step ``k - 1`` (whose end opens the window), step ``k`` (captured; its end stops
the window and copies its events out of torch), and steps ``k + 1`` and ``k + 2`` (while the flush
thread converts and writes the window, sharing the interpreter).

    python benchmarks/always_on.py [--rounds 3] [--steps 1000] [--every 100]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from overhead import make_step  # noqa: E402  (the same 3-layer MLP step)

from otel_profiler import api  # noqa: E402


def block(step, steps: int, profiled: bool, folder: str, every: int) -> list[int]:
    times = []
    if profiled:
        session = api.Profiler(profile_dir=folder, steps="off", every_steps=every, window_steps=1,
                               activities="gpu,cpu_op", summary_at_exit=False, signal=False, auto_steps=False,
                               slow_step_factor=0)
        session.__enter__()
    try:
        for _ in range(steps):
            t = time.perf_counter_ns()
            step()
            if profiled:
                api.step()
            times.append(time.perf_counter_ns() - t)
    finally:
        if profiled:
            session.__exit__(None, None, None)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--every", type=int, default=100)
    args = parser.parse_args()
    torch.set_num_threads(1)
    step = make_step()
    for _ in range(30):
        step()
    totals: dict[bool, list[int]] = {False: [], True: []}
    around: dict[int, list[int]] = {d: [] for d in (-1, 0, 1, 2)}
    normal: list[int] = []
    plain: list[int] = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for profiled in (False, True):
                times = block(step, args.steps, profiled, f"{tmp}/round-{r}", args.every)
                totals[profiled].append(sum(times))
                if not profiled:
                    plain += times
                if profiled:
                    for k in range(args.every, args.steps - 3, args.every):  # window 0 pays torch's first start
                        for d in around:
                            around[d].append(times[k + d])
                    normal += [t for i, t in enumerate(times) if 3 <= i % args.every <= args.every - 2]
    base = statistics.median(normal)
    ratio = statistics.median(totals[True]) / statistics.median(totals[False])
    print(f"one window in {args.every} steps, operators recorded; torch threads 1; {args.rounds} rounds of "
          f"{args.steps} steps")
    print(f"wall time profiled / plain: {ratio:.3f}")
    print(f"median step: unprofiled {statistics.median(plain) / 1e6:.3f} ms, profiled but not captured "
          f"{base / 1e6:.3f} ms")
    names = {-1: "step before (window opens)", 0: "captured step (window stops)", 1: "step after",
             2: "second step after"}
    for d, values in around.items():
        print(f"  {names[d]:30s} +{(statistics.median(values) - base) / 1e6:7.2f} ms")
    per_window = sum(statistics.median(v) - base for v in around.values())
    print(f"per window on the training thread: {per_window / 1e6:.1f} ms "
          f"({per_window / (args.every * base):.1%} of {args.every} steps)")


if __name__ == "__main__":
    main()
