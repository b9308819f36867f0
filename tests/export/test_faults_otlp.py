"""Fault injection on the OTLP path with default settings (30 s of retries, 10 s per request, the
default close): a real profiled training job of about two seconds against an endpoint that is
down (closed port), hangs (accepts TCP, never answers), answers HTTP 500 / gRPC INTERNAL or 503 /
UNAVAILABLE for the whole run, flaps or is slow, with both cores kept busy by other processes.

The contract (docs/delivery.md): the job ends normally; every span the span model makes of the
job's profile folder is delivered or spooled, none dropped; after ``otel-profiler replay`` to a
healthy receiver every step span (and every other span) has arrived, and the spool is empty. Step
times under each fault are measured by ``benchmarks/``, not here.
"""

from __future__ import annotations

import subprocess
import sys
from contextlib import ExitStack

import pytest

from fault_kit import (FaultyReceiver, SilentPort, busy_cores, expected_requests, job_env,  # noqa: F401
                       otlp_env, pb_requests, run_job, span_ids, step_span_ids)
from otlp_receiver import free_port

pytest.importorskip("torch")

FAULTS = [("down", "grpc"), ("down", "http/protobuf"), ("hang", "grpc"), ("hang", "http/protobuf"),
          ("fail500", "http/protobuf"), ("fail500", "grpc"), ("errors", "http/protobuf"),
          ("flap", "grpc"), ("slow", "http/protobuf")]
STEPS = 40  # x 50 ms: a two-second job (plus start-up)


def replay(spool, endpoint: str, protocol: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "otel_profiler", "replay", str(spool), "--endpoint", endpoint,
                           "--protocol", protocol], capture_output=True, text=True, timeout=300)


def short_job_env(tmp_path, endpoint: str, protocol: str) -> dict[str, str]:
    env = job_env(tmp_path / "prof", **otlp_env(endpoint, protocol, tmp_path / "spool"))
    env.pop("OTEL_PROFILER_FLUSH_INTERVAL_S")  # the default too: a short job writes at its end
    return env


@pytest.mark.parametrize("fault,protocol", FAULTS, ids=[f"{f}-{p.split('/')[0]}" for f, p in FAULTS])
def test_a_short_job_loses_no_span_whatever_the_endpoint_does(tmp_path, busy_cores, fault, protocol):
    with ExitStack() as stack:
        receiver = stack.enter_context(FaultyReceiver("ok" if fault in ("down", "hang") else fault))
        if fault == "down":
            endpoint = f"http://127.0.0.1:{free_port()}"
        elif fault == "hang":
            endpoint = stack.enter_context(SilentPort()).endpoint
        else:
            endpoint = receiver.endpoint(protocol)
        out = run_job(["--steps", str(STEPS), "--step-sleep", "0.05"], short_job_env(tmp_path, endpoint, protocol),
                      timeout=600)
        delivered = receiver.requests
    assert out.returncode == 0, out.stderr[-3000:]
    assert "dropped" not in out.stderr and "Traceback" not in out.stderr, out.stderr
    expected = expected_requests(tmp_path / "prof", tmp_path / "expected.pb")
    expected_ids, expected_steps = set(span_ids(expected)), step_span_ids(expected)
    assert len(expected_steps) == STEPS  # one per iteration, the first from its forward pass
    spooled = span_ids(pb_requests(tmp_path / "spool"))
    assert set(span_ids(delivered)) | set(spooled) == expected_ids  # delivered or spooled, none dropped
    if fault in ("down", "hang", "errors", "fail500"):
        assert not delivered and spooled
        assert bool(receiver.refused) == (fault in ("errors", "fail500"))
    if fault == "flap":
        assert receiver.refused  # retries did the delivering
    replayed = []
    if spooled:
        with FaultyReceiver("ok") as later:
            done = replay(tmp_path / "spool", later.endpoint(protocol), protocol)
            replayed = later.requests
        assert done.returncode == 0, done.stderr
    assert step_span_ids(delivered + replayed) == expected_steps  # every step span arrived
    assert set(span_ids(delivered + replayed)) == expected_ids
    assert not list((tmp_path / "spool").glob("*.pb"))  # replay emptied the spool


def test_exporter_killed_mid_run_warns_once_and_the_job_goes_on(tmp_path, busy_cores):
    from cuda_tracer.model.events import Kind
    from cuda_tracer.loading import load_profile

    from fault_kit import expected_span_ids

    with FaultyReceiver("ok") as receiver:
        env = job_env(tmp_path / "prof", **otlp_env(receiver.endpoint("grpc"), "grpc", tmp_path / "spool"))
        out = run_job(["--steps", "160", "--step-sleep", "0.02", "--kill-exporter-at", "100",
                       "--stats", str(tmp_path / "stats.json")], env, timeout=600)
        delivered = span_ids(receiver.requests)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "killed exporter" in out.stdout and (tmp_path / "stats.json").exists()  # the loop ran to its end
    assert out.stderr.count("exporter process ended unexpectedly") == 1, out.stderr
    assert "batches (exporter gone)" in out.stderr  # later parts counted as dropped, said at close
    steps = load_profile([str(tmp_path / "prof")]).ranks[0].batch.of_kind(Kind.STEP)
    assert len(steps) == 160  # every step still recorded on disk
    expected = set(expected_span_ids(tmp_path / "prof", tmp_path / "expected.pb"))
    assert set(delivered) < expected  # at most what went before the kill, never the rest
