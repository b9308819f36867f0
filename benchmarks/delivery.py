"""The delivery contract, measured: spans lost and job exit codes under each endpoint fault and
bad setting, and how long the job's close took, with default settings.

For each OTLP fault (closed port, a port that accepts TCP and never answers, HTTP 500 / gRPC
INTERNAL or HTTP 503 for the whole run, a flapping and a slow receiver, a healthy one) a profiled
``tests/fault_job.py`` of about five seconds runs; then ``otel-profiler replay`` sends its spool to
a healthy receiver. Spans expected are what ``otel-profiler export`` makes of the job's profile
folder; lost = expected - (delivered during the run + delivered by replay). The close time is the
job's wall time minus the same job's wall time unprofiled (a ratio would hide a fixed delay).
Bad settings run the same job and report its exit code and the warning lines it printed.

    python benchmarks/delivery.py [--steps 100] [--busy N]

``--busy N`` runs N busy-loop processes meanwhile (a loaded machine).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from fault_kit import (JOB, FaultyReceiver, SilentPort, expected_requests, job_env, otlp_env,  # noqa: E402
                       pb_requests, run_job, span_ids, step_span_ids)
from otlp_receiver import free_port  # noqa: E402

FAULTS = [("healthy", "grpc"), ("down", "grpc"), ("down", "http/protobuf"), ("hang", "grpc"),
          ("hang", "http/protobuf"), ("fail500", "http/protobuf"), ("fail500", "grpc"),
          ("errors", "http/protobuf"), ("flap", "grpc"), ("slow", "http/protobuf")]
SETTINGS = [("OTEL_EXPORTER_OTLP_ENDPOINT", "not a url"), ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://collector:4317"), ("OTEL_PROFILER_SPAN_BUDGET", "9" * 30),
            ("OTEL_PROFILER_EXPORT_QUEUE", "9" * 30), ("OTEL_EXPORTER_OTLP_TIMEOUT", "9" * 30),
            ("OTEL_PROFILER_STEP", "1:3")]


def one_fault(tmp: Path, fault: str, protocol: str, steps: int, bare_s: float) -> tuple:
    with ExitStack() as stack:
        mode = "ok" if fault in ("down", "hang", "healthy") else fault
        receiver = stack.enter_context(FaultyReceiver(mode))
        endpoint = (f"http://127.0.0.1:{free_port()}" if fault == "down" else
                    stack.enter_context(SilentPort()).endpoint if fault == "hang" else receiver.endpoint(protocol))
        env = job_env(tmp / "prof", **otlp_env(endpoint, protocol, tmp / "spool"))
        env.pop("OTEL_PROFILER_FLUSH_INTERVAL_S")
        started = time.monotonic()
        out = run_job(["--steps", str(steps), "--step-sleep", "0.05"], env)
        took = time.monotonic() - started
        delivered = receiver.requests
    spooled = list(pb_requests(tmp / "spool"))
    replayed = []
    if spooled:
        with FaultyReceiver("ok") as later:
            subprocess.run([sys.executable, "-m", "otel_profiler", "replay", str(tmp / "spool"), "--endpoint",
                            later.endpoint(protocol), "--protocol", protocol], capture_output=True, timeout=600)
            replayed = later.requests
    expected = expected_requests(tmp / "prof", tmp / "expected.pb")
    got = set(span_ids(delivered + replayed))
    lost = len(set(span_ids(expected)) - got)
    steps_lost = len(step_span_ids(expected) - step_span_ids(delivered + replayed))
    return (f"{fault} ({protocol})", out.returncode, len(span_ids(expected)), len(span_ids(delivered)),
            len(span_ids(spooled)), lost, steps_lost, took - bare_s)


def one_setting(tmp: Path, name: str, value: str, steps: int) -> tuple:
    env = job_env(tmp / "prof", **{name: value})
    out = run_job(["--steps", str(steps), "--step-sleep", "0.05"], env)
    warnings = [line for line in out.stderr.splitlines() if line.startswith("otel-profiler")]
    profiled = any((tmp / "prof").glob("rank-0.*.events"))
    return f"{name}={value[:24]!r}", out.returncode, len(warnings), profiled, (warnings or [""])[0][:110]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--busy", type=int, default=0)
    args = ap.parse_args()
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            started = time.monotonic()
            bare = subprocess.run([sys.executable, JOB, "--steps", str(args.steps), "--step-sleep", "0.05"],
                                  capture_output=True, timeout=600)
            bare_s = time.monotonic() - started
            assert bare.returncode == 0
            print("| fault | job exit | spans expected | delivered in run | spooled | lost after replay "
                  "| step spans lost | extra job time (s) |")
            print("|---|---|---|---|---|---|---|---|")
            for i, (fault, protocol) in enumerate(FAULTS):
                row = one_fault(Path(tmp) / f"f{i}", fault, protocol, args.steps, bare_s)
                print("| " + " | ".join(f"{c:.1f}" if isinstance(c, float) else str(c) for c in row) + " |",
                      flush=True)
            print()
            print("| setting | job exit | warning lines | profiled | first line |")
            print("|---|---|---|---|---|")
            for i, (name, value) in enumerate(SETTINGS):
                row = one_setting(Path(tmp) / f"s{i}", name, value, args.steps)
                print("| " + " | ".join(str(c) for c in row) + " |", flush=True)
    finally:
        for p in busy:
            p.kill()
            p.wait()


if __name__ == "__main__":
    main()
