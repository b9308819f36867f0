"""Step-time overhead of each profiling mode on a CPU training loop, beside torch.profiler's own.

Modes, measured side by side in one process: blocks of steps run in round-robin order (unprofiled,
otel-profiler default, otel-profiler with CPU ops (and their shapes), torch.profiler with CPU
activity, without and with ``record_shapes``), so machine noise hits every mode alike; each mode's
figure is its median step time divided by the unprofiled median. Then the cost of one ``annotate()`` enter+exit in ns, beside ``torch.profiler.record_function``
and an OpenTelemetry SDK span.

    python benchmarks/overhead.py [--rounds 20] [--steps 10] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from typing import Callable, ContextManager

import torch
from torch import nn

from otel_profiler import Profiler, annotate
from otel_profiler.live.steps import markers


def make_step() -> Callable[[], None]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(64, 512), torch.randint(0, 10, (64,))
    loss_fn = nn.CrossEntropyLoss()

    def step() -> None:
        with annotate("forward"):
            loss = loss_fn(model(x), y)
        with annotate("backward"):
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
        with annotate("optimizer"):
            optimizer.step()

    return step


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def modes(folder: str) -> dict[str, Callable[[], ContextManager]]:
    quiet = dict(profile_dir=folder, summary_at_exit=False, signal=False)
    return {
        "unprofiled": _Nothing,
        "otel-profiler default": lambda: Profiler(steps="off", **quiet),
        "otel-profiler cpu ops": lambda: Profiler(steps="0:1000000", activities="gpu,cpu_op", **quiet),
        "torch.profiler (CPU)": lambda: torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]),
        "torch.profiler (CPU, shapes)": lambda: torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                                                       record_shapes=True),
    }


def measure_steps(rounds: int, steps: int) -> dict[str, list[int]]:
    step = make_step()
    for _ in range(20):
        step()
    times: dict[str, list[int]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        ms = modes(tmp)
        for _ in range(rounds):
            for name, context in ms.items():
                with context():
                    step()  # the first step of a block pays the mode's start-up: not counted
                    for _ in range(steps):
                        t = time.perf_counter_ns()
                        step()
                        times.setdefault(name, []).append(time.perf_counter_ns() - t)
    return times


def ns_per_call(fn: Callable[[], None], n: int = 100_000) -> float:
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter_ns()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter_ns() - t) / n)
    return best


def annotation_costs() -> dict[str, float]:
    def ours() -> None:
        with annotate("x"):
            pass

    def record_function() -> None:
        with torch.profiler.record_function("x"):
            pass

    def empty() -> None:
        pass

    out = {"empty Python call": ns_per_call(empty)}
    out["annotate(), no session"] = ns_per_call(ours)
    markers.active = True
    try:
        out["annotate(), recording"] = ns_per_call(ours)
    finally:
        markers.active = False
        markers.drain()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        out["torch record_function, profiling"] = ns_per_call(record_function, 20_000)
    try:
        from opentelemetry.sdk.trace import TracerProvider

        tracer = TracerProvider().get_tracer("bench")

        def otel_span() -> None:
            with tracer.start_as_current_span("x"):
                pass

        out["OpenTelemetry SDK span"] = ns_per_call(otel_span, 20_000)
    except ImportError:
        pass
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per mode per round")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    times = measure_steps(args.rounds, args.steps)
    base = statistics.median(times["unprofiled"])
    print(f"Step-time overhead ({args.rounds} rounds x {args.steps} steps per mode, interleaved; "
          f"torch threads {args.threads})")
    print(f"{'mode':<26} {'median step (ms)':>17} {'ratio':>7}")
    for name, values in times.items():
        med = statistics.median(values)
        print(f"{name:<26} {med / 1e6:>17.3f} {med / base:>7.3f}")
    print()
    print(f"{'one enter+exit':<34} {'ns':>8}")
    for name, ns in annotation_costs().items():
        print(f"{name:<34} {ns:>8.0f}")


if __name__ == "__main__":
    main()
