"""Import speed and peak memory: otel-profiler load+summary vs Holistic Trace Analysis' load.

The ratio is taken against HTA's ``TraceAnalysis`` load alone (as the target is stated); HTA's
load plus its temporal breakdown is printed beside it.

Each measurement runs in a fresh subprocess (so peak RSS is that work's own), alternating between the
two tools, and the table reports medians and ratios. Usage::

    python benchmarks/trace_import.py [--repeat 3] [--ranks N] [TRACE]

Default trace: the largest test trace, ``hta/df_index_resolver`` (216k events). ``--ranks N``
measures a folder of N per-rank copies of it (each given its own ``distributedInfo`` rank), as a
multi-GPU job leaves them: both tools then read the files in parallel processes (ours as
``otel-profiler summary`` does, HTA with its own pool), and peak RSS is the main process's plus the
largest reader process's.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_TRACE = os.path.join(HERE, "..", "tests", "data", "traces", "hta",
                             "df_index_resolver", "df_index_resolver.json.gz")

PEAK = ("(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss"
        " + resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024")

OURS = """
import json, resource, sys, time
t = time.perf_counter()
from cuda_tracer.loading import load_profile
from otel_profiler.analysis.summary import summarize
summary = summarize(load_profile([sys.argv[1]], workers=None))
seconds = time.perf_counter() - t
print(json.dumps({"seconds": seconds, "peak_mib": %s}))
""" % PEAK

HTA = """
import json, logging, os, resource, shutil, sys, tempfile, time
folder = tempfile.mkdtemp()
for path in [sys.argv[1]] if os.path.isfile(sys.argv[1]) else [
        os.path.join(sys.argv[1], name) for name in os.listdir(sys.argv[1])]:
    shutil.copy(path, os.path.join(folder, os.path.basename(path)))
logging.disable(logging.CRITICAL)
t = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
analyzer = TraceAnalysis(trace_dir=folder)
load_seconds = time.perf_counter() - t
try:  # (HTA's breakdown needs GPU kernels: a CPU-only trace has none)
    analyzer.get_temporal_breakdown(visualize=False)
    seconds = time.perf_counter() - t
except Exception:
    seconds = None
shutil.rmtree(folder)
print(json.dumps({"seconds": load_seconds, "with_temporal_seconds": seconds, "peak_mib": %s}))
""" % PEAK


def measure(code: str, trace: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.join(HERE, ".."))
    out = subprocess.run([sys.executable, "-c", code, trace], capture_output=True, text=True,
                         env=env, timeout=600, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _medians(runs: list[dict], time_key: str) -> dict | None:
    if any(r[time_key] is None for r in runs):
        return None
    return {"seconds": statistics.median(r[time_key] for r in runs),
            "peak_mib": statistics.median(r["peak_mib"] for r in runs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", default=DEFAULT_TRACE)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--ranks", type=int, default=0, help="a folder of N per-rank copies")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        target = _rank_folder(args.trace, args.ranks, folder) if args.ranks else args.trace
        ours_runs, hta_runs, serial_runs = [], [], []
        for _ in range(args.repeat):
            ours_runs.append(measure(OURS, target))
            hta_runs.append(measure(HTA, target))
            if args.ranks:  # the same, one file after the other
                serial_runs.append(measure(OURS.replace("workers=None", "workers=1"), target))
    med = {
        "otel-profiler load+summary": _medians(ours_runs, "seconds"),
        "HTA 0.5.0 TraceAnalysis load": _medians(hta_runs, "seconds"),
        "HTA 0.5.0 load+temporal breakdown": _medians(hta_runs, "with_temporal_seconds"),
    }
    if serial_runs:
        med["otel-profiler, one file at a time"] = _medians(serial_runs, "seconds")
    ours, hta = med["otel-profiler load+summary"], med["HTA 0.5.0 TraceAnalysis load"]
    assert ours and hta
    ranks = f", {args.ranks} ranks" if args.ranks else ""
    print(f"trace: {os.path.basename(args.trace)}{ranks}  ({args.repeat} alternating runs, medians)")
    print(f"{'tool':36} {'time (s)':>9} {'peak RSS (MiB)':>15}")
    for name, m in med.items():
        print(f"{name:36} {m['seconds']:9.2f} {m['peak_mib']:15.0f}" if m else f"{name:36} {'n/a':>9}")
    targets = ("", "") if args.ranks else (" (target >= 10x)", " (target <= 1.0)")
    print(f"speed-up vs HTA: {hta['seconds'] / ours['seconds']:.1f}x{targets[0]}; "
          f"peak memory ratio ours/HTA: {ours['peak_mib'] / hta['peak_mib']:.2f}{targets[1]}")


def _rank_folder(trace: str, ranks: int, folder: str) -> str:
    """``ranks`` gzip copies of ``trace``, each with ``distributedInfo`` naming its rank."""
    with gzip.open(trace, "rb") as f:
        text = f.read()
    start = text.index(b"{") + 1
    for rank in range(ranks):
        info = json.dumps({"distributedInfo": {"rank": rank, "world_size": ranks}})[1:-1].encode()
        with gzip.open(os.path.join(folder, f"rank-{rank}.json.gz"), "wb", compresslevel=1) as out:
            out.write(text[:start] + info + b"," + text[start:])
    return folder


if __name__ == "__main__":
    main()
