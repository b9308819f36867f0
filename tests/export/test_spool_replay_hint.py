"""Spans spooled at a job's exit are never silent: a real training job against a hanging gRPC endpoint
(accepts TCP, never answers) ends with one warning line naming the spool folder and the exact
``otel-profiler replay`` command; run as printed, once a receiver listens on that port, it delivers
every span the job spooled, and with them every span of the job's profile."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pytest

from fault_kit import SilentPort, expected_requests, job_env, otlp_env, pb_requests, run_job, span_ids
from otlp_receiver import OtlpReceiver

pytest.importorskip("torch")
pytestmark = pytest.mark.fault_process

JOB_EXIT = 7


def test_spans_spooled_at_exit_are_named_with_the_replay_command_that_sends_them(tmp_path):
    spool = tmp_path / "spool"
    with SilentPort() as hanging:
        env = job_env(tmp_path / "prof", **otlp_env(hanging.endpoint, "grpc", spool))
        env.pop("OTEL_PROFILER_FLUSH_INTERVAL_S")  # the default too: a short job writes at its end
        out = run_job(["--steps", "40", "--step-sleep", "0.05", "--exit-code", str(JOB_EXIT)], env)
        port = hanging.port
    assert out.returncode == JOB_EXIT, out.stderr[-3000:]
    assert "Traceback" not in out.stderr and "dropped" not in out.stderr, out.stderr
    spooled = span_ids(pb_requests(spool))
    assert spooled
    hints = [line for line in out.stderr.splitlines() if "otel-profiler replay" in line]
    assert len(hints) == 1, out.stderr
    (hint,) = hints
    assert hint.startswith("otel-profiler: warning: ") and f"spool {spool};" in hint, hint
    assert re.search(rf"\b{len(spooled)} spans were not delivered", hint), hint
    command = shlex.split(hint.split("send them with: ", 1)[1])
    assert command == ["otel-profiler", "replay", str(spool), "--endpoint", f"http://127.0.0.1:{port}",
                       "--protocol", "grpc"], hint
    # The command as printed, once a receiver answers on the job's endpoint.
    with OtlpReceiver(grpc_port=port) as receiver:
        assert receiver.grpc_port == port
        done = subprocess.run([sys.executable, "-m", "otel_profiler", *command[1:]], capture_output=True,
                              text=True, timeout=300)
        received = list(receiver.collected.requests)
    assert done.returncode == 0, done.stderr
    assert sorted(span_ids(received)) == sorted(spooled)
    assert set(span_ids(received)) == set(span_ids(expected_requests(tmp_path / "prof", tmp_path / "all.pb")))
    assert not list(spool.glob("*.pb"))
