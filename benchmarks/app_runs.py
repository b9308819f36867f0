"""The Profiler app at scale: a store of N runs (default 10,000), ``otel-profiler serve`` over it, and
the landing page and ``/api/runs`` under 20 concurrent clients on loopback (p50/p95 per request),
side by side with listing the same runs the way a page without the index would (reading every run's
metadata and summary per request); the first and the cached open of a real (small) run's report.

    python benchmarks/app_runs.py [--runs 10000] [--clients 20] [--requests 400]

The runs are one real profile folder (written by ``otel-profiler run`` here) whose ``rank-0.json`` and
``summary.json`` are copied N times with 20 teams, 200 users, 50 hosts and spread start times; each
request asks for a page of 50 runs of one team with a text filter or a sort, as users do.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "tests" / "scripts" / "manual_sgd.py"


def cli(*args: str, stdin: str = "") -> str:
    return subprocess.run([sys.executable, "-m", "otel_profiler", *args], input=stdin, capture_output=True,
                          text=True, check=True).stdout


def build_store(root: Path, runs: int) -> Path:
    store = root / "store"
    store.mkdir()
    env = dict(os.environ, OTEL_RESOURCE_ATTRIBUTES="ml.team=team-3,enduser.id=user-3")
    subprocess.run([sys.executable, "-m", "otel_profiler", "run", "--output-dir", str(store / "real-run"), "--",
                    sys.executable, str(SCRIPT)], env=env, check=True, capture_output=True)
    meta = json.loads((store / "real-run" / "rank-0.json").read_text())
    summary = (store / "real-run" / "summary.json").read_text()
    start = meta["windows"][0]["start_ns"]
    for i in range(runs - 1):
        folder = store / f"run-{i:05d}"
        folder.mkdir()
        meta["resource"].update({"ml.team": f"team-{i % 20}", "enduser.id": f"user-{i % 200}",
                                 "service.name": f"model-{i % 7}"})
        meta["host_name"] = f"host-{i % 50}"
        meta["windows"][0]["start_ns"] = start - i * 60 * 10**9
        (folder / "rank-0.json").write_text(json.dumps(meta))
        (folder / "summary.json").write_text(summary)
    return store


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1e3, ordered[int(0.95 * (len(ordered) - 1))] * 1e3


def load(url_of, clients: int, count: int, session_cookies=None, headers=None) -> tuple[float, float, float]:
    """(p50 ms, p95 ms, requests per second) of ``count`` GETs from ``clients`` threads."""
    def one(i: int) -> float:
        t0 = time.perf_counter()
        response = requests.get(url_of(i), cookies=session_cookies, headers=headers, timeout=300)
        response.raise_for_status()
        return time.perf_counter() - t0

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        samples = list(pool.map(one, range(count)))
    p50, p95 = percentiles(samples)
    return p50, p95, count / (time.perf_counter() - t0)


def unindexed_listing(store: Path, team: str) -> float:
    """Seconds to list one team's runs by reading every run folder (what a page without the index does)."""
    from otel_profiler.app.storage.store import read_run, run_folders

    t0 = time.perf_counter()
    rows = [f for run_id, sig in run_folders(str(store)) if (f := read_run(str(store), run_id, sig)) and f.team == team]
    sorted(rows, key=lambda f: f.start_ns or 0, reverse=True)[:50]
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--requests", type=int, default=400)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="otel-app-bench-"))
    server = None
    try:
        t0 = time.perf_counter()
        store = build_store(root, args.runs)
        print(f"store of {args.runs:,} runs made in {time.perf_counter() - t0:.1f} s")
        cli("teams", "add", "team-3", "--store", str(store))
        cli("users", "add", "u", "--team", "team-3", "--role", "member", "--store", str(store), stdin="bench password\n")
        cli("users", "add", "a", "--team", "team-3", "--role", "admin", "--no-password", "--store", str(store))
        token = cli("users", "token", "u", "--store", str(store)).strip()
        admin = cli("users", "token", "a", "--store", str(store)).strip()
        log = root / "serve.log"
        t0 = time.perf_counter()
        server = subprocess.Popen([sys.executable, "-m", "otel_profiler", "serve", "--store", str(store), "--port", "0"],
                                  stdout=open(log, "w"), stderr=subprocess.STDOUT)
        while not (m := re.search(r"http://127\.0\.0\.1:(\d+)/", log.read_text())):
            if server.poll() is not None or time.perf_counter() - t0 > 600:
                raise SystemExit(f"serve did not start: {log.read_text()}")
            time.sleep(0.2)
        url = f"http://127.0.0.1:{m.group(1)}"
        print(f"listening after {time.perf_counter() - t0:.1f} s")
        while requests.get(url + "/api/runs", headers={"Authorization": f"Bearer {admin}"}).json()["total"] < args.runs:
            time.sleep(0.5)
        print(f"first scan of the store done after {time.perf_counter() - t0:.1f} s")
        session = requests.Session()
        page = session.get(url + "/login").text
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
        session.post(url + "/login", data={"name": "u", "password": "bench password", "csrf_token": csrf})
        cookies = session.cookies.get_dict()
        queries = ["", "?sort=duration", "?text=host-13", "?user=user-23", "?page=3", "?sort=host&order=asc"]
        rows = [("landing page, 1 client", load(lambda i: url + "/" + queries[i % len(queries)], 1,
                                                  len(queries) * 5, session_cookies=cookies)),
                ("landing page, team member", load(lambda i: url + "/" + queries[i % len(queries)], args.clients,
                                                     args.requests, session_cookies=cookies)),
                ("/api/runs, team member", load(lambda i: url + "/api/runs" + queries[i % len(queries)], args.clients,
                                                args.requests, headers={"Authorization": f"Bearer {token}"})),
                ("/api/runs, admin (all runs)", load(lambda i: url + "/api/runs" + queries[i % len(queries)],
                                                     args.clients, args.requests,
                                                     headers={"Authorization": f"Bearer {admin}"}))]
        print(f"\n{args.requests} requests from {args.clients} concurrent clients on loopback (first row: 1 client):")
        print(f"{'':30}{'p50 ms':>10}{'p95 ms':>10}{'req/s':>10}")
        for label, (p50, p95, rate) in rows:
            print(f"{label:30}{p50:10.1f}{p95:10.1f}{rate:10.1f}")
        unindexed = min(unindexed_listing(store, "team-3") for _ in range(3))
        print(f"\nlisting one team without the index (every run folder read, one client): {unindexed * 1e3:.0f} ms "
              f"= {unindexed * 1e3 / rows[0][1][0]:.0f}x the indexed landing page's p50 with 1 client")
        opens = []
        for _ in range(2):
            t0 = time.perf_counter()
            session.get(url + "/runs/real-run", timeout=600).raise_for_status()
            opens.append(time.perf_counter() - t0)
        print(f"report of the real run: first open {opens[0] * 1e3:.0f} ms (built), cached open {opens[1] * 1e3:.0f} ms "
              f"({opens[0] / opens[1]:.0f}x faster)")
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=60)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
