"""Every benchmark of the project in one table: benchmark, figure, target, measured, pass/fail.

Runs ``trace_import.py``, ``overhead.py``, ``encode.py``, ``metrics.py`` and ``report.py`` as
subprocesses (smaller settings where they take them), parses their printed figures, then measures
the step-time ratio of ``tests/fault_job.py`` profiled under each OTLP fault (endpoint down, HTTP 503
errors, flapping gRPC, slow HTTP, exporter killed) against the same job unprofiled.

    python benchmarks/run_all.py [--faults-only]
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))


def run(args: list[str], timeout: float = 600) -> str:
    done = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)
    return done.stdout + done.stderr


def grab(pattern: str, text: str) -> float | None:
    m = re.search(pattern, text)
    return float(m.group(1).replace(",", "")) if m else None


def benchmarks() -> list[tuple[str, str, str, float | None, bool | None]]:
    rows = []
    out = run(["benchmarks/trace_import.py", "--repeat", "1"])
    speed, mem = grab(r"speed-up vs HTA: ([\d.]+)x", out), grab(r"ours/HTA: ([\d.]+)", out)
    rows += [("trace_import", "import speed-up vs HTA", ">= 5x", speed, speed and speed >= 5),
             ("trace_import", "peak memory ours/HTA", "<= 1.0", mem, mem is not None and mem <= 1.0)]
    out = run(["benchmarks/overhead.py"])
    for mode in ("otel-profiler default", "otel-profiler cpu ops"):
        r = grab(re.escape(mode) + r"\s+[\d.]+\s+([\d.]+)", out)
        rows.append(("overhead", f"step time ratio, {mode}", "<= 1.03", r, r is not None and r <= 1.03))
    ns = grab(r"annotate\(\), recording\s+(\d+)", out)
    rows.append(("overhead", "annotate() enter+exit ns", "< 2000", ns, ns is not None and ns < 2000))
    out = run(["benchmarks/encode.py", "--copies", "5", "--memory-batches", "2"])
    sdk = grab(r"\(a\) OTel SDK.*\|\s+([\d.]+)x \|", out)
    rows.append(("encode", "encoder speed vs OTel SDK", ">= 10x", sdk, sdk is not None and sdk >= 10))
    peaks = [float(x) for x in re.findall(r"peak RSS (\d+) MiB", out)]
    grow = peaks[-1] / peaks[0] if len(peaks) >= 2 else None
    rows.append(("encode", "exporter peak RSS 10x input / 1x", "<= 1.5", grow, grow is not None and grow <= 1.5))
    out = run(["benchmarks/metrics.py", "--ticks", "100", "--scrapes", "50"])
    pct = grab(r"total at 1 s sampling \+ 1 s scrapes: ([\d.]+) %", out)
    rows.append(("metrics", "sampler + scrape, % of a core", "< 0.5", pct, pct is not None and pct < 0.5))
    out = run(["benchmarks/report.py", "--copies", "2", "--no-browser"])
    total = grab(r"df_index_resolver\s+[\d,]+\s+[\d,]+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+[\d.]+\s+([\d.]+)", out)
    rows.append(("report", "HTML report of largest trace, s", "< 5", total, total is not None and total < 5))
    return rows


FAULTS = (  # label, receiver mode, protocol, job arguments
    ("OTLP ok", "ok", "grpc", []),
    ("OTLP down (grpc)", "down", "grpc", []),
    ("OTLP HTTP 503 errors", "errors", "http/protobuf", []),
    ("OTLP flapping (gRPC UNAVAILABLE)", "flap", "grpc", []),
    ("OTLP slow (2 s/request, HTTP)", "slow", "http/protobuf", []),
    ("exporter SIGKILLed at step 100", "ok", "grpc", ["--kill-exporter-at", "100"]),
)


def fault_ratios(rounds: int = 3) -> list[tuple[str, str, str, float | None, bool | None]]:
    """Median over ``rounds`` of: median step time profiled under a fault / the same job
    unprofiled, run just before it (so machine drift hits both alike). 400 steps of ~8 ms, the
    first 10 % (exporter start-up) left out by the job itself."""
    from fault_kit import FaultyReceiver, job_env, otlp_env, run_job
    from otlp_receiver import free_port

    args = ["--steps", "400", "--width", "512", "--step-sleep", "0.005"]
    plain = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    plain["PYTHONPATH"] = str(REPO)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        def median_step(env: dict, tag: str, extra: list[str]) -> float:
            stats = Path(tmp) / f"{tag}.json"
            run_job([*args, *extra, "--stats", str(stats)], env, timeout=120)
            return json.loads(stats.read_text())["median_step_s"]

        for n, (label, mode, protocol, extra) in enumerate(FAULTS):
            ratios = []
            for i in range(rounds):
                with FaultyReceiver("ok" if mode == "down" else mode, delay_s=2.0) as rec:
                    endpoint = f"http://127.0.0.1:{free_port()}" if mode == "down" else rec.endpoint(protocol)
                    env = job_env(Path(tmp) / f"p{n}-{i}", **otlp_env(endpoint, protocol, Path(tmp) / f"s{n}-{i}"))
                    base = median_step(plain, f"base{n}-{i}", [])
                    ratios.append(median_step(env, f"f{n}-{i}", extra) / base)
            r = sorted(ratios)[len(ratios) // 2]
            rows.append(("faults", f"step time ratio, {label}", "<= 1.03", r, r <= 1.03))
    return rows


def main() -> None:
    faults_only = "--faults-only" in sys.argv[1:]
    rows = ([] if faults_only else benchmarks()) + fault_ratios()
    print(f"| {'benchmark':<12} | {'figure':<50} | {'target':<8} | {'measured':>9} | result |")
    print(f"|{'-' * 14}|{'-' * 52}|{'-' * 10}|{'-' * 11}|--------|")
    for bench, figure, target, value, ok in rows:
        shown = "n/a" if value is None else f"{value:.3f}" if value < 100 else f"{value:,.0f}"
        print(f"| {bench:<12} | {figure:<50} | {target:<8} | {shown:>9} | {'pass' if ok else 'FAIL':<6} |")


if __name__ == "__main__":
    main()
