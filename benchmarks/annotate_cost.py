"""Cost of one ``annotate`` range (enter + exit) through both spellings, beside torch's
``record_function``: ``from otel_profiler import annotate`` then ``annotate("x")``, and
``import otel_profiler`` then ``otel_profiler.annotate("x")`` (the package attribute, bound once
loaded), with no session and with a session recording; ``torch.profiler.record_function("x")``
outside a torch profiler (what a script pays in every step when nothing profiles it).

Rounds of each kind alternate, so load on the machine hits all alike; the figure is the best round
per range in ns (least disturbed by other work on the machine, and by the session's flush thread),
less an empty loop's, and the ratio to ``record_function``'s best round.

    python benchmarks/annotate_cost.py [--rounds 30] [--ranges 20000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Callable

import torch

import otel_profiler
from otel_profiler import Profiler, annotate


def from_import(ranges: int) -> None:
    for _ in range(ranges):
        with annotate("x"):
            pass


def package_attribute(ranges: int) -> None:
    for _ in range(ranges):
        with otel_profiler.annotate("x"):
            pass


def record_function(ranges: int) -> None:
    for _ in range(ranges):
        with torch.profiler.record_function("x"):
            pass


def empty(ranges: int) -> None:
    for _ in range(ranges):
        pass


def per_range_ns(kinds: dict[str, Callable[[int], None]], rounds: int, ranges: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in kinds}
    for _ in range(rounds):
        for name, loop in kinds.items():
            t0 = time.perf_counter_ns()
            loop(ranges)
            times[name].append((time.perf_counter_ns() - t0) / ranges)
    loop_ns = min(times.pop("empty loop"))
    return {name: min(values) - loop_ns for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--ranges", type=int, default=20000)
    args = parser.parse_args()
    kinds = {"empty loop": empty, "from otel_profiler import annotate": from_import,
             "otel_profiler.annotate": package_attribute, "torch record_function": record_function}
    idle = per_range_ns(kinds, args.rounds, args.ranges)
    with tempfile.TemporaryDirectory() as folder:
        with Profiler(profile_dir=folder, steps="off", summary_at_exit=False, signal=False):
            recording = per_range_ns(kinds, args.rounds, args.ranges)
    torch_ns = idle.pop("torch record_function")
    recording.pop("torch record_function")
    print(f"torch.profiler.record_function (no torch profiler): {torch_ns:7.0f} ns per range")
    for label, figures in (("no session", idle), ("recording", recording)):
        for name, ns in figures.items():
            print(f"{name:34s} {label:10s}: {ns:7.0f} ns per range, {ns / torch_ns:.2f}x record_function")


if __name__ == "__main__":
    main()
