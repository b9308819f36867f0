"""Import speed and peak memory: otel-profiler load+summary vs Holistic Trace Analysis' load.

The ratio is taken against HTA's ``TraceAnalysis`` load alone (as the target is stated); HTA's
load plus its temporal breakdown is printed beside it.

Each measurement runs in a fresh subprocess (so peak RSS is that work's own), alternating between the
two tools, and the table reports medians and ratios. Usage::

    python benchmarks/trace_import.py [--repeat 3] [TRACE]

Default trace: the largest shared one, ``hta/df_index_resolver`` (216k events).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_TRACE = os.path.join(HERE, "..", "..", "shared", "data", "kineto_traces", "hta",
                             "df_index_resolver", "df_index_resolver.json.gz")

OURS = """
import json, resource, sys, time
t = time.perf_counter()
from cuda_tracer.loading import load_profile
from otel_profiler.analysis.summary import summarize
summary = summarize(load_profile([sys.argv[1]]))
seconds = time.perf_counter() - t
print(json.dumps({"seconds": seconds,
                  "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

HTA = """
import json, logging, os, resource, shutil, sys, tempfile, time
folder = tempfile.mkdtemp()
shutil.copy(sys.argv[1], os.path.join(folder, os.path.basename(sys.argv[1])))
logging.disable(logging.CRITICAL)
t = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
analyzer = TraceAnalysis(trace_dir=folder)
load_seconds = time.perf_counter() - t
analyzer.get_temporal_breakdown(visualize=False)
seconds = time.perf_counter() - t
shutil.rmtree(folder)
print(json.dumps({"seconds": load_seconds, "with_temporal_seconds": seconds,
                  "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def measure(code: str, trace: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.join(HERE, ".."))
    out = subprocess.run([sys.executable, "-c", code, trace], capture_output=True, text=True,
                         env=env, timeout=600, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _medians(runs: list[dict], time_key: str) -> dict:
    return {"seconds": statistics.median(r[time_key] for r in runs),
            "peak_mib": statistics.median(r["peak_mib"] for r in runs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", default=DEFAULT_TRACE)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    ours_runs, hta_runs = [], []
    for _ in range(args.repeat):
        ours_runs.append(measure(OURS, args.trace))
        hta_runs.append(measure(HTA, args.trace))
    med = {
        "otel-profiler load+summary": _medians(ours_runs, "seconds"),
        "HTA 0.5.0 TraceAnalysis load": _medians(hta_runs, "seconds"),
        "HTA 0.5.0 load+temporal breakdown": _medians(hta_runs, "with_temporal_seconds"),
    }
    ours, hta = med["otel-profiler load+summary"], med["HTA 0.5.0 TraceAnalysis load"]
    print(f"trace: {os.path.basename(args.trace)}  ({args.repeat} alternating runs, medians)")
    print(f"{'tool':36} {'time (s)':>9} {'peak RSS (MiB)':>15}")
    for name, m in med.items():
        print(f"{name:36} {m['seconds']:9.2f} {m['peak_mib']:15.0f}")
    print(f"speed-up vs HTA: {hta['seconds'] / ours['seconds']:.1f}x (target >= 5x); "
          f"peak memory ratio ours/HTA: {ours['peak_mib'] / hta['peak_mib']:.2f} (target <= 1.0)")


if __name__ == "__main__":
    main()
