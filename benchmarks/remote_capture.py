"""Capture across a running job: what a rank's report costs the training process, and the Profiler
app's load when a fleet of ranks reports to it.

1. One rank's report (``live.remote_capture.RemoteCapture.report_once``) against a real
   ``otel-profiler serve``: the CPU time it takes in the reporting thread, median of ``--reports``.
2. ``--ranks`` simulated ranks reporting every ``--poll`` seconds (``--ranks / --poll`` requests a
   second, spread evenly) for ``--seconds``: the rate the app answered, the answers' latency
   (p50, p99) and the app process's CPU (user + system over the wall time, in cores).

    python benchmarks/remote_capture.py [--ranks 1000] [--poll 5] [--seconds 20] [--reports 200]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import requests

from otel_profiler.live.remote_capture import RemoteCapture


def _cli(*args: str, stdin: str = "") -> str:
    return subprocess.run([sys.executable, "-m", "otel_profiler", *args], input=stdin, capture_output=True,
                          text=True, check=True, timeout=120).stdout


def serve(store: Path) -> tuple[subprocess.Popen, str, str]:
    store.mkdir()
    _cli("teams", "add", "fleet", "--store", str(store))
    _cli("users", "add", "trainer", "--team", "fleet", "--role", "member", "--no-password", "--store", str(store))
    token = _cli("users", "token", "trainer", "--store", str(store)).strip()
    log = store.parent / "serve.log"
    server = subprocess.Popen([sys.executable, "-m", "otel_profiler", "serve", "--store", str(store), "--port", "0"],
                              stdout=open(log, "w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while not (found := re.search(r"on (http://127\.0\.0\.1:\d+)/", log.read_text())):
        if time.monotonic() > deadline or server.poll() is not None:
            raise SystemExit(f"the app did not start: {log.read_text()}")
        time.sleep(0.1)
    return server, found.group(1), token


def report_cost(url: str, token: str, reports: int) -> float:
    """Median CPU ms of one report in the reporting thread."""
    remote = RemoteCapture(url, token, "bench-one-rank", 5.0, "bench", lambda: (0, 100, 0.01), lambda a, b: None)
    costs = []
    for _ in range(reports):
        t0 = time.thread_time()
        remote.report_once()
        costs.append(time.thread_time() - t0)
    return statistics.median(costs) * 1e3


def fleet(url: str, token: str, ranks: int, poll_s: float, seconds: float, app: psutil.Process) -> dict:
    rate = ranks / poll_s
    session = requests.Session()
    adapter = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=64)
    session.mount("http://", adapter)
    headers = {"Authorization": f"Bearer {token}"}

    def one(i: int) -> float:
        t0 = time.perf_counter()
        reply = session.post(f"{url}/api/runs/bench-fleet-{i % 8}/ranks/{i % ranks}", headers=headers, timeout=30,
                             json={"step": i, "step_s": 0.2, "poll_s": poll_s, "host": f"node-{i % 125}"})
        reply.raise_for_status()
        return time.perf_counter() - t0

    cpu0, start = app.cpu_times(), time.perf_counter()
    latencies: list[float] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=64) as pool:
        futures = []
        n = int(rate * seconds)
        for i in range(n):
            due = start + i / rate
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            futures.append(pool.submit(one, i))
        latencies = [f.result() for f in futures]
    wall = time.perf_counter() - start
    cpu1 = app.cpu_times()
    q = statistics.quantiles(latencies, n=100)
    return {"asked_per_s": rate, "answered_per_s": len(latencies) / wall, "p50_ms": q[49] * 1e3,
            "p99_ms": q[98] * 1e3, "app_cores": (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=1000)
    parser.add_argument("--poll", type=float, default=5.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--reports", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="otel-profiler-bench-") as tmp:
        server, url, token = serve(Path(tmp) / "store")
        try:
            app = psutil.Process(server.pid)
            print(f"one report, CPU in the reporting thread: {report_cost(url, token, args.reports):.3f} ms (median "
                  f"of {args.reports})")
            f = fleet(url, token, args.ranks, args.poll, args.seconds, app)
            print(f"{args.ranks} ranks every {args.poll:g} s: asked {f['asked_per_s']:.0f}/s, answered "
                  f"{f['answered_per_s']:.0f}/s, latency p50 {f['p50_ms']:.1f} ms p99 {f['p99_ms']:.1f} ms, "
                  f"app CPU {f['app_cores']:.2f} cores (SQLite store)")
        finally:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
