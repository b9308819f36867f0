"""Back-to-back and split capture windows, many runs: does any crash, and what do they cost?

Runs ``examples/train_mlp.py`` in fresh processes, interleaved: unprofiled, and profiled with
operators recorded and a window part handed over at every step (``OTEL_PROFILER_WINDOW_PART_STEPS=1``,
a window for the whole run), the worst case for torch's profiler being stopped and started. With
``--heap-checks`` every profiled run also has CPython's debug allocator and glibc's heap checks
(``PYTHONMALLOC=debug``, ``MALLOC_CHECK_=3``). It prints each run's exit status and time, then
the crashes in N runs, the windows started and the time ratio to unprofiled.

    python benchmarks/window_stress.py [--runs 10] [--epochs 40] [--heap-checks]

The CI version (a few minutes) is ``tests/live/test_window_stress.py``.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
JOB = str(REPO / "examples" / "train_mlp.py")
SPLIT = {"OTEL_PROFILER_ACTIVITIES": "gpu,cpu_op", "OTEL_PROFILER_WINDOW_PART_STEPS": "1",
         "OTEL_PROFILER_DURATION_S": "1e9"}


def run(epochs: int, profiled: dict[str, str] | None, folder: str) -> tuple[int, float, int]:
    """Exit status, seconds, and window parts the profile recorded (0 unprofiled)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = str(REPO)
    if profiled is None:
        env["OTEL_SDK_DISABLED"] = "true"
    else:
        env.update({"OTEL_PROFILER_ENABLED": "true", "OTEL_PROFILER_OUTPUT_DIR": folder,
                    "OTEL_PROFILER_SUMMARY_AT_EXIT": "false", **profiled})
    began = time.perf_counter()
    proc = subprocess.run([sys.executable, JOB, "--epochs", str(epochs)], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seconds = time.perf_counter() - began
    parts = 0
    for meta in glob.glob(os.path.join(folder, "*", "rank-*.json")):
        with open(meta) as f:
            parts += sum(w.get("parts", 0) for w in json.load(f).get("windows", []))
    return proc.returncode, seconds, parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--heap-checks", action="store_true")
    args = parser.parse_args()
    profiled = dict(SPLIT)
    if args.heap_checks:
        profiled.update(PYTHONMALLOC="debug", MALLOC_CHECK_="3")
    crashes, parts, plain_s, profiled_s = 0, 0, [], []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory() as folder:
            code, seconds, _ = run(args.epochs, None, folder)
            plain_s.append(seconds)
            print(f"run {i + 1}: unprofiled exit {code}, {seconds:.1f} s", flush=True)
        with tempfile.TemporaryDirectory() as folder:
            code, seconds, windows = run(args.epochs, profiled, folder)
            crashes += code != 0
            parts += windows
            profiled_s.append(seconds)
            print(f"run {i + 1}: profiled exit {code}, {seconds:.1f} s, {windows} window parts", flush=True)
    ratio = statistics.median(profiled_s) / statistics.median(plain_s)
    print(f"crashes: {crashes} in {args.runs} runs; {parts} window parts started and stopped; "
          f"median time profiled / unprofiled: {ratio:.2f}"
          + (" (profiled runs under heap checks)" if args.heap_checks else ""))


if __name__ == "__main__":
    main()
