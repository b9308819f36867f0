"""Cost of finding steps without code (the torch hooks of ``live.steps.torch_steps``), and of NVTX mirroring.

1. What each hook costs per call, in process (best of many runs, so load on the machine hardly
   matters): an optimizer step ending a step, a backward pass that is ignored, a backward pass
   ending a step. Then the per-step time of a small CPU training step, unprofiled vs profiled with automatic steps (no
   detailed window), for an optimizer loop (optimizer hooks) and a manual-SGD loop (backward
   wrapper). Blocks of steps alternate between the modes, so noise hits both alike; the figure is
   the difference of the medians in µs and the ratio of the medians.
2. ``annotate()`` enter+exit with ``OTEL_PROFILER_NVTX`` off vs on, with C no-ops standing in for
   the NVTX calls (this CPU build has no NVTX): the profiler's own Python cost of mirroring; the
   NVTX library call itself (tens of ns, per NVIDIA) comes on top on a GPU machine.

    python benchmarks/step_detection.py [--rounds 30] [--steps 20]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

from otel_profiler import Profiler, annotate
from otel_profiler.live.steps import markers


def optimizer_step():
    torch.manual_seed(0)
    model = torch.nn.Linear(32, 32)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(8, 32)

    def step():
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    return step


def manual_step():
    torch.manual_seed(0)
    model = torch.nn.Linear(32, 32)
    x = torch.randn(8, 32)

    def step():
        model.zero_grad()
        model(x).pow(2).mean().backward()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(p.grad, alpha=-1e-3)
    return step


def per_step_ns(step, steps: int) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(steps):
        step()
    return (time.perf_counter_ns() - t0) / steps


def compare(make, rounds: int, steps: int, folder: str) -> tuple[float, float]:
    step = make()
    for _ in range(50):
        step()
    plain, hooked = [], []
    profiler = Profiler(profile_dir=folder, steps="off", slow_step_factor=0, summary_at_exit=False, signal=False)
    for _ in range(rounds):
        plain.append(per_step_ns(step, steps))
        profiler.start()
        hooked.append(per_step_ns(step, steps))
        profiler.stop()
    return statistics.median(plain), statistics.median(hooked)


def hook_costs(folder: str) -> dict[str, float]:
    """Per-call cost (ns, best of 20 runs of 2000 calls) of what the hooks call in the session."""
    from otel_profiler.live.session import current

    def best(fn) -> float:
        runs = []
        for _ in range(20):
            t0 = time.perf_counter_ns()
            for _ in range(2000):
                fn()
            runs.append((time.perf_counter_ns() - t0) / 2000)
            markers.drain()
        return min(runs)

    out = {}
    with Profiler(profile_dir=folder, steps="off", slow_step_factor=0, summary_at_exit=False, signal=False):
        session = current()
        out["optimizer step ends a step (post-hook)"] = best(lambda: session.step_boundary(manual=False))
        out["backward pass ignored (optimizer steps are the source)"] = best(session.backward_done)
        session.evidence.source = "backward"
        out["backward pass ends a step (manual-SGD loop)"] = best(session.backward_done)
    return out


def annotate_ns(n: int) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(n):
        with annotate("x"):
            pass
    return (time.perf_counter_ns() - t0) / n


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        for label, make in (("optimizer loop (optimizer hooks)", optimizer_step),
                            ("manual-SGD loop (backward wrapper)", manual_step)):
            plain, hooked = compare(make, args.rounds, args.steps, f"{tmp}/{label[:3]}")
            print(f"{label}: unprofiled {plain / 1e3:.1f} us/step, automatic steps {hooked / 1e3:.1f} us/step, "
                  f"added {(hooked - plain) / 1e3:+.2f} us/step (ratio {hooked / plain:.3f})")
        for what, ns in hook_costs(f"{tmp}/hooks").items():
            print(f"hook: {what}: {ns:.0f} ns per call")
    off, on = [], []
    for _ in range(15):
        markers.nvtx = None
        off.append(annotate_ns(20000))
        markers.nvtx = (id, time.perf_counter, id, id)  # C functions of the NVTX calls' arity
        on.append(annotate_ns(20000))
    markers.nvtx = None
    print(f"annotate() enter+exit: NVTX off {statistics.median(off):.0f} ns, NVTX mirroring on "
          f"{statistics.median(on):.0f} ns (+{statistics.median(on) - statistics.median(off):.0f} ns "
          "before the NVTX library call itself)")


if __name__ == "__main__":
    main()
