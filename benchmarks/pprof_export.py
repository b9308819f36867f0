"""What ``otel-profiler export TRACE --format pprof`` costs against ``otel-profiler summary TRACE``
on the 2M-event trace of ``large_trace.py``: both commands run as a user runs them (a fresh process
each, same inputs, same reading), alternately, side by side.

    python benchmarks/pprof_export.py [--repeat 3] [--events 2000000] [--trace FILE]

Prints the median and best wall time and CPU time (of the command's process) of each, and the ratio
pprof/summary (goal: within 1.5); on a machine shared with other work the best of the runs is the
one least disturbed.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

from large_trace import large_trace  # noqa: E402

GOAL = 1.5


def timed(command: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of ``command`` run to completion (CPU: user + system of the child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each command (default: 3)")
    parser.add_argument("--events", type=int, default=2_000_000, help="events of the generated trace")
    parser.add_argument("--trace", help="a trace file instead of the generated one")
    args = parser.parse_args()
    trace = args.trace or large_trace(args.events)
    cli = [sys.executable, "-m", "otel_profiler"]
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "profile.pb.gz")
        commands = {"summary": cli + ["summary", "--format", "json", "-o", os.path.join(folder, "s.json"),
                                      trace],
                    "pprof": cli + ["export", trace, "--format", "pprof", "-o", out]}
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        for _ in range(args.repeat):
            for name, command in commands.items():
                times[name].append(timed(command))
        size = os.path.getsize(out)
    print(f"trace: {Path(trace).name}, {args.repeat} runs of each command; pprof file {size / 1e3:.1f} kB")
    for i, clock in ((0, "wall"), (1, "CPU")):
        for label, pick in (("median", statistics.median), ("best", min)):
            summary = pick(t[i] for t in times["summary"])
            pprof = pick(t[i] for t in times["pprof"])
            print(f"{clock:>4} {label:>6}: summary --format json {summary:.2f} s, export --format pprof "
                  f"{pprof:.2f} s, ratio pprof/summary {pprof / summary:.2f} (goal <= {GOAL})")


if __name__ == "__main__":
    main()
