"""Trace import at scale, side by side with Holistic Trace Analysis (HTA) 0.5.0, in one run.

1. Every shared trace: the time to read it into memory, ours (``load_profile``) and HTA's
   (``TraceAnalysis`` on a folder holding it), each in a fresh process after its imports, the
   ratio per trace (target >= 8x).
2. A 2M-event trace (``large_trace.py``: a shared trace's events repeated with shifted times and
   ids, built once into ``benchmarks/.cache``): ``otel-profiler summary`` as a user runs it, whole
   process (interpreter start to exit), in events per second of the file (target >= 700k/s) and
   the peak resident memory of its process tree (sampled every 20 ms; target <= 600 MiB), for
   ``-j 1`` and ``-j 2`` (its pieces decoded by two reader processes), with the time the process
   tree waited for a core held by other work; HTA's load of the same file beside it.

    python benchmarks/large_import.py [--events 2000000] [--repeat 3] [--skip-hta-large] [--only-large]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from large_trace import SHARED, large_trace  # noqa: E402

CPU = ("(lambda u, c: u.ru_utime + u.ru_stime + c.ru_utime + c.ru_stime)("
       "resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN))")

OURS_LOAD = """
import json, resource, sys, time
from cuda_tracer.loading import load_profile
cpu, t = %s, time.perf_counter()
profile = load_profile([sys.argv[1]], workers=None)
print(json.dumps({"seconds": time.perf_counter() - t, "cpu": %s - cpu, "events": len(profile.batch())}))
""" % (CPU, CPU)

HTA_LOAD = """
import json, logging, os, resource, shutil, sys, tempfile, time
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
folder = tempfile.mkdtemp()
shutil.copy(sys.argv[1], os.path.join(folder, os.path.basename(sys.argv[1])))
cpu, t = %s, time.perf_counter()
analyzer = TraceAnalysis(trace_dir=folder)
seconds, cpu = time.perf_counter() - t, %s - cpu
shutil.rmtree(folder)
print(json.dumps({"seconds": seconds, "cpu": cpu}))
""" % (CPU, CPU)


def run_measured(cmd: list[str]) -> tuple[float, float, str, float]:
    """Wall seconds, peak RSS (MiB) of the whole process tree (sampled), stdout, and CPU seconds
    of the tree (user + system)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    # as installed: modules load from their cached bytecode (pip compiles it at install; a
    # PYTHONDONTWRITEBYTECODE environment would have every run compile them from source again)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    out = tempfile.TemporaryFile()
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL, env=env)
    peak = 0
    waited: dict[int, float] = {}  # per process: seconds runnable but waiting for a core
    root = psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            tree = [root, *root.children(recursive=True)]
            peak = max(peak, sum(p.memory_info().rss for p in tree))
            for p in tree:
                waited[p.pid] = _run_queue_wait(p.pid, waited.get(p.pid, 0.0))
        except psutil.Error:
            pass
        time.sleep(0.02)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    out.seek(0)
    if proc.returncode:
        raise SystemExit(f"{cmd[:4]} failed with exit code {proc.returncode}")
    LAST_WAIT[0] = sum(waited.values())
    return wall, peak / 2**20, out.read().decode(), cpu


LAST_WAIT = [0.0]  # run-queue wait of the last measured process tree (seconds)


def _run_queue_wait(pid: int, default: float) -> float:
    """Seconds the process has been runnable but not running (Linux ``/proc/PID/schedstat``): on a
    shared machine, the part of the wall time spent waiting for a core held by other work."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return default


def python(code: str, *args: str) -> dict:
    _, peak, out, _ = run_measured([sys.executable, "-c", code, *args])
    return dict(json.loads(out.strip().splitlines()[-1]), peak_mib=peak)


def every_shared_trace(repeat: int) -> None:
    print(f"1. every shared trace: read into memory, after imports; {repeat} fresh processes each, "
          "interleaved, medians;")
    print("   wall seconds and CPU seconds (user + system, readers included; the kernel counts CPU "
          "in 4 ms ticks, so CPU ratios of the smallest traces are coarse)")
    print(f"{'trace':44} {'events':>7} {'ours':>6} {'HTA':>6} {'ratio':>6} {'ours cpu':>8} "
          f"{'HTA cpu':>7} {'ratio':>6}")
    ratios, cpu_ratios = [], []
    for path in sorted(Path(SHARED).rglob("*.json.gz")):
        runs = [(python(OURS_LOAD, str(path)), python(HTA_LOAD, str(path))) for _ in range(repeat)]
        ours = {k: statistics.median(r[0][k] for r in runs) for k in ("seconds", "cpu", "events")}
        hta = {k: statistics.median(r[1][k] for r in runs) for k in ("seconds", "cpu")}
        ours["events"] = int(ours["events"])
        ratios.append(hta["seconds"] / ours["seconds"])
        cpu_ratios.append(hta["cpu"] / max(ours["cpu"], 1e-3))
        print(f"{path.name[:44]:44} {ours['events']:7d} {ours['seconds']:6.2f} {hta['seconds']:6.2f} "
              f"{ratios[-1]:5.1f}x {ours['cpu']:8.2f} {hta['cpu']:7.2f} {cpu_ratios[-1]:5.1f}x")
    for name, r in (("wall", ratios), ("CPU", cpu_ratios)):
        print(f"{name}: lowest ratio {min(r):.1f}x, median {sorted(r)[len(r) // 2]:.1f}x "
              "(target >= 8x on every trace)")


def large(events: int, with_hta: bool, repeat: int) -> None:
    path = large_trace(events)
    n = _file_events(path)
    print(f"\n2. {os.path.basename(path)}: {n:,} events, {os.path.getsize(path) / 2**20:.0f} MiB gzip")
    print(f"{'run (whole process)':40} {'wall (s)':>8} {'events/s':>9} {'CPU (s)':>8} "
          f"{'ev/CPU-s':>9} {'peak MiB':>8} {'waited (s)':>10}")
    rows, walls = [], []
    for label, jobs in (("otel-profiler summary -j 1", ["-j", "1"]),
                        ("otel-profiler summary -j 2", ["-j", "2"])):
        runs = []
        for _ in range(repeat):
            wall, peak, _, cpu = run_measured([sys.executable, "-m", "otel_profiler", "summary",
                                               *jobs, "--format", "json", "-o", os.devnull, path])
            runs.append((wall, peak, cpu, LAST_WAIT[0]))
        runs.sort()  # the run of median wall time
        rows.append((label, *runs[len(runs) // 2]))
        walls.append(f"{label}: " + ", ".join(f"{r[0]:.2f}" for r in runs) + " s")
    if with_hta:
        wall, peak, _, cpu = run_measured([sys.executable, "-c", HTA_LOAD, path])
        rows.append(("HTA 0.5.0 TraceAnalysis load", wall, peak, cpu, LAST_WAIT[0]))
    for label, wall, peak, cpu, waited in rows:
        print(f"{label:40} {wall:8.1f} {n / wall:9,.0f} {cpu:8.1f} {n / cpu:9,.0f} {peak:8.0f} "
              f"{waited:10.1f}")
    print("waited: time the process tree was ready to run but every core was taken by other work")
    print(f"ours: the median of {repeat} runs; every wall time: " + "; ".join(walls))
    if with_hta:
        print(f"speed-up vs HTA: {rows[-1][1] / rows[1][1]:.1f}x (-j 2), "
              f"{rows[-1][1] / rows[0][1]:.1f}x (-j 1); targets: >= 1M events/s, <= 600 MiB")
    load = os.getloadavg()[0]
    print(f"load average during the run: {load:.1f} on {os.cpu_count()} cores "
          "(figures scale with the CPU time left to this benchmark)")


def _file_events(path: str) -> int:
    """Events in the file's traceEvents (every phase), counted from its text."""
    import gzip

    n = 0
    with gzip.open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            n += chunk.count(b'"ph":')
    return n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--skip-hta-large", action="store_true")
    parser.add_argument("--only-large", action="store_true")
    parser.add_argument("--repeat", type=int, default=3, help="fresh processes per trace and reader")
    args = parser.parse_args()
    if not args.only_large:
        every_shared_trace(args.repeat)
    large(args.events, not args.skip_hta_large, args.repeat)


if __name__ == "__main__":
    main()
