"""Fault injection on the OTLP path: a real profiled training process against a real receiver that is
down, flapping, slow or answering errors, and the exporter process killed mid-run.

Each job ends normally (exit 0, its output intact); every span the span model makes of the job's
profile folder is delivered or spooled (none dropped: the spool has room), and after
``otel-profiler replay`` the receiver holds them all. Step-time ratios under each fault are
measured by ``benchmarks/faults.py``, not here.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from fault_kit import FaultyReceiver, expected_span_ids, job_env, otlp_env, pb_requests, run_job, span_ids
from otlp_receiver import free_port

pytest.importorskip("torch")

FAULTS = [("down", "grpc"), ("errors", "http/protobuf"), ("flap", "grpc"), ("slow", "http/protobuf")]
CLOSE_TIMEOUT_S = 5.0  # session.close() gives the exporter this long


def replay(spool, endpoint: str, protocol: str) -> None:
    done = subprocess.run([sys.executable, "-m", "otel_profiler", "replay", str(spool), "--endpoint", endpoint,
                           "--protocol", protocol], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("fault,protocol", FAULTS, ids=[f"{f}-{p.split('/')[0]}" for f, p in FAULTS])
def test_endpoint_faults_lose_no_span_after_replay(tmp_path, fault, protocol):
    receiver = FaultyReceiver("ok" if fault == "down" else fault, delay_s=2.0).start()
    endpoint = f"http://127.0.0.1:{free_port()}" if fault == "down" else receiver.endpoint(protocol)
    try:
        started = time.monotonic()
        out = run_job(["--steps", "40", "--step-sleep", "0.02"],
                      job_env(tmp_path / "prof", **otlp_env(endpoint, protocol, tmp_path / "spool")))
        took = time.monotonic() - started
        delivered = span_ids(receiver.requests)
    finally:
        receiver.stop()
    assert out.returncode == 0, out.stderr[-3000:]
    assert "dropped" not in out.stderr and "Traceback" not in out.stderr, out.stderr
    spooled = span_ids(pb_requests(tmp_path / "spool"))
    expected = set(expected_span_ids(tmp_path / "prof", tmp_path / "expected.pb"))
    assert len(expected) > 100
    assert set(delivered) | set(spooled) == expected  # delivered or spooled, nothing dropped
    if fault in ("down", "errors"):
        assert not delivered and bool(receiver.refused) == (fault == "errors")
    if fault == "flap":
        assert delivered and receiver.refused  # both phases happened
    # Job time = torch start-up + ~1.5 s of steps + at most the close timeout.
    assert took < 20 + CLOSE_TIMEOUT_S, took
    if not spooled:  # flapping: retries delivered everything
        assert set(delivered) == expected
        return
    with FaultyReceiver("ok") as later:
        replay(tmp_path / "spool", later.endpoint(protocol), protocol)
        assert set(delivered) | set(span_ids(later.requests)) == expected
    assert not list((tmp_path / "spool").glob("*.pb"))  # replay emptied the spool


def test_exporter_killed_mid_run_warns_once_and_the_job_goes_on(tmp_path):
    from cuda_tracer.events import Kind
    from cuda_tracer.loading import load_profile

    with FaultyReceiver("ok") as receiver:
        env = job_env(tmp_path / "prof", **otlp_env(receiver.endpoint("grpc"), "grpc", tmp_path / "spool"))
        out = run_job(["--steps", "160", "--step-sleep", "0.02", "--kill-exporter-at", "100",
                       "--stats", str(tmp_path / "stats.json")], env)
        delivered = span_ids(receiver.requests)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "killed exporter" in out.stdout and (tmp_path / "stats.json").exists()  # the loop ran to its end
    assert out.stderr.count("exporter process ended unexpectedly") == 1, out.stderr
    assert "batches (exporter gone)" in out.stderr  # later parts counted as dropped, said at close
    steps = load_profile([str(tmp_path / "prof")]).ranks[0].batch.of_kind(Kind.STEP)
    assert len(steps) == 159  # every step still recorded on disk
    expected = set(expected_span_ids(tmp_path / "prof", tmp_path / "expected.pb"))
    assert set(delivered) < expected  # at most what went before the kill, never the rest
