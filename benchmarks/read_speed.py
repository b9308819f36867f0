"""Trace JSON read speed of one worker, whole process, beside the standard library's ``json.load``.

The repository's df_index_resolver trace repeated ten times (2.16M events; ``large_trace.py``,
built once into ``benchmarks/.cache``) is read by a fresh process each time, interpreter start to
exit, in interleaved rounds:

- ``native``: ``load_profile`` with the native scanner (what a cluster worker does per rank);
- ``pure Python``: the same with ``OTEL_PROFILER_PURE_PYTHON=1`` (no scanner);
- ``json.load``: ``json.load(gzip.open(path))``, what a script without our reader would do (it only
  parses: no columns, no checks).

Printed per reader (medians of ``--repeat`` rounds): MB of JSON text per wall second, MB per CPU
second (user + sys of the process, which other work on the machine distorts less than wall time),
peak RSS, and the ratio of each to ``json.load``. The goal (issue 29): at least 200 MB/s per worker.

    python benchmarks/read_speed.py [--repeat 3] [--events 2160000] [--skip-pure] [--trace FILE]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from large_trace import SHARED, large_trace  # noqa: E402

SOURCE = os.path.join(SHARED, "hta", "df_index_resolver", "df_index_resolver.json.gz")
MB = 1e6
GOAL_MB_S = 200

READERS = {
    "native": ("from cuda_tracer.loading import load_profile\n"
               "import sys\nload_profile([sys.argv[1]])", {"OTEL_PROFILER_PURE_PYTHON": "0"}),
    "pure Python": ("from cuda_tracer.loading import load_profile\n"
                    "import sys\nload_profile([sys.argv[1]])", {"OTEL_PROFILER_PURE_PYTHON": "1"}),
    "json.load": ("import gzip, json, sys\n"
                  "with gzip.open(sys.argv[1], 'rb') as f:\n    json.load(f)", {}),
}


def run_once(code: str, env: dict[str, str], path: str) -> tuple[float, float, float]:
    """Wall s, CPU s (user + sys) and peak RSS (MiB) of one fresh process reading ``path``."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code, path], cwd=REPO,
                            env={**os.environ, **env})
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"read_speed: the {code.splitlines()[-1]!r} run failed (exit {proc.returncode})")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def text_bytes(path: str) -> int:
    """Bytes of JSON text in the gzip file (counted by decompressing it once)."""
    from cuda_tracer.trace_input import text_chunks

    return sum(map(len, text_chunks(path, max_text_bytes=1 << 40)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds (medians are printed)")
    parser.add_argument("--events", type=int, default=2_160_000)
    parser.add_argument("--skip-pure", action="store_true", help="leave out the pure-Python reader")
    parser.add_argument("--trace", help="read this trace instead of building the ten-times one")
    args = parser.parse_args()
    if args.repeat < 1 or args.events < 1:
        parser.exit(2, "read_speed: --repeat and --events must be at least 1\n")
    if args.trace and not os.path.isfile(args.trace):
        parser.exit(2, f"read_speed: --trace {args.trace}: no such file\n")
    path = args.trace or large_trace(args.events, SOURCE)
    size = text_bytes(path)
    readers = [r for r in READERS if not (args.skip_pure and r == "pure Python")]
    runs: dict[str, list[tuple[float, float, float]]] = {r: [] for r in readers}
    for _ in range(args.repeat):
        for reader in readers:
            code, env = READERS[reader]
            runs[reader].append(run_once(code, env, path))
    print(f"{os.path.basename(path)}: {size / MB:,.0f} MB of JSON; whole process, medians of "
          f"{args.repeat} rounds; {os.cpu_count()} cores")
    median = {r: [statistics.median(v[i] for v in runs[r]) for i in range(3)] for r in readers}
    base_wall, base_cpu = median["json.load"][0], median["json.load"][1]
    print("| reader | wall | MB/s wall | CPU | MB per CPU-s | peak RSS | vs json.load wall | CPU |")
    print("|---|---|---|---|---|---|---|---|")
    for reader in readers:
        wall, cpu, rss = median[reader]
        print(f"| {reader} | {wall:.2f} s | {size / MB / wall:.0f} | {cpu:.2f} s | "
              f"{size / MB / cpu:.0f} | {rss:.0f} MiB | {base_wall / wall:.1f}x | {base_cpu / cpu:.1f}x |")
    wall = median["native"][0]
    verdict = "met" if size / MB / wall >= GOAL_MB_S else "missed"
    print(f"goal >= {GOAL_MB_S} MB/s wall per worker (native): {size / MB / wall:.0f} MB/s, {verdict}")


if __name__ == "__main__":
    main()
