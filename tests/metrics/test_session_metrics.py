"""The session starts metrics at its first recorded step and feeds them every written batch.

End to end: ``otel-profiler run`` of a small CPU torch job with ``OTEL_PROFILER_PROMETHEUS_PORT`` set
serves ``/metrics`` with step series while the job runs (the test scrapes it, no Prometheus needed;
``tests/metrics/test_metrics_prometheus.py`` covers a real one). In process: a session that records no step
(the torchrun agent's) never takes the port, and the exporter's drop counters become metrics.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from cuda_tracer.model.events import Kind
from cuda_tracer.loading import load_profile
from otel_profiler import api
from otel_profiler.live import session

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 120

JOB = """
import os, sys, time
import torch
stop = sys.argv[1]
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 8), torch.randn(64, 1)
deadline = time.monotonic() + 300
while not os.path.exists(stop) and time.monotonic() < deadline:
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()  # the optimizer hook counts the steps
    time.sleep(0.02)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
            return response.read().decode()
    except OSError:
        return None


def step_count(text: str | None) -> float:
    """Steps observed so far, from the step-duration histogram's ``_count`` (0 when absent)."""
    found = re.search(r"^otel_profiler_step_duration_seconds_count\{[^}]*\} (\S+)$", text or "", re.M)
    return float(found.group(1)) if found else 0.0


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH"))}
    env.update(OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none", OTEL_PROFILER_SIGNAL="false")
    env.update(extra)
    return env


def test_run_serves_step_metrics_while_a_torch_job_runs(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("prometheus_client")
    port = free_port()
    script, stop = tmp_path / "job.py", tmp_path / "stop"
    script.write_text(JOB)
    env = clean_env(OTEL_PROFILER_PROMETHEUS_PORT=str(port), OTEL_PROFILER_FLUSH_INTERVAL_S="0.2",
                    OTEL_SERVICE_NAME="metrics-session-test")
    cmd = [sys.executable, "-m", "otel_profiler", "run", "--output-dir", str(tmp_path / "prof"), "--",
           sys.executable, str(script), str(stop)]
    proc = subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    text = None
    try:
        deadline = time.monotonic() + 240  # start-up, torch's import and five steps on a busy machine
        while time.monotonic() < deadline and proc.poll() is None:
            text = scrape(port)
            if step_count(text) >= 5:
                break
            time.sleep(0.2)
    finally:
        stop.write_text("")
        out, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == 0, err[-3000:]
    assert step_count(text) >= 5, f"no step series on /metrics while the job ran:\n{(text or '')[:2000]}\n{err[-2000:]}"
    assert re.search(r'^otel_profiler_step_duration_seconds_bucket\{[^}]*otel_profiler_rank="0"', text, re.M)
    assert re.search(r'^otel_profiler_events_total\{[^}]*step', text, re.M), text[:3000]
    assert "metrics are off" not in err and "Prometheus endpoint is off" not in err, err
    assert scrape(port) is None  # the endpoint closed with the job
    steps = load_profile([str(tmp_path / "prof")]).ranks[0].batch.of_kind(Kind.STEP)
    assert len(steps) >= step_count(text)


QUIET = dict(signal=False, summary_at_exit=False, steps="off", flush_interval_s=60)


def started_metrics(live: session.Session, timeout_s: float = 60.0):
    """The session's MetricsService once its flush thread has started it (None after the timeout)."""
    deadline = time.monotonic() + timeout_s
    while live.metrics is None and time.monotonic() < deadline:
        time.sleep(0.05)
    return live.metrics


def test_a_session_that_records_no_step_starts_no_metrics(tmp_path):
    pytest.importorskip("prometheus_client")
    port = free_port()
    with api.Profiler(profile_dir=str(tmp_path), prometheus_port=port, **QUIET):
        with api.annotate("launcher work"):  # the torchrun agent annotates nothing, steps never
            pass
        assert started_metrics(session.current(), timeout_s=0.6) is None  # three flush-thread polls
        assert scrape(port) is None
        api.step()
        api.step()  # the first recorded step starts them (in the flush thread)
        metrics = started_metrics(session.current())
        assert metrics is not None and metrics.url is not None
        assert scrape(port) is not None
    assert metrics.endpoint is None and scrape(port) is None  # closed with the session


class _FakeExporter:
    def __init__(self) -> None:
        self.batches = 0

    def submit(self, meta, batch) -> bool:
        self.batches += 1
        return True

    def counters(self) -> dict[str, int]:
        return {"batches_submitted": self.batches, "batches_dropped_queue_full": 7, "spans_dropped": 2}

    def close(self, timeout_s: float = 10.0) -> dict[str, int]:
        return self.counters()


def test_exporter_drop_counters_and_flushed_steps_reach_the_metrics(tmp_path, monkeypatch):
    pytest.importorskip("prometheus_client")
    fake = _FakeExporter()
    monkeypatch.setattr(session, "_exporter_factory", lambda: lambda settings, service: fake)
    with api.Profiler(profile_dir=str(tmp_path), prometheus_port=free_port(), **QUIET):
        for _ in range(4):
            api.step()
        live = session.current()
        metrics = started_metrics(live)
        live.flush()
        points = metrics.points()
    assert fake.batches >= 1
    dropped = {p.attributes["otel_profiler.reason"]: p.value for p in points
               if p.spec.name == "otel_profiler.events.dropped" and
               p.attributes.get("otel_profiler.reason", "").startswith("export_")}
    assert dropped == {"export_batches_dropped_queue_full": 7.0, "export_spans_dropped": 2.0}
    step_points = [p for p in points if p.spec.name == "otel_profiler.step.duration"]
    assert step_points, "flushed steps did not reach the profile-derived metrics"
