"""The README's shortest way to Jaeger: a zero-code job sends OTLP straight to a real Jaeger v2 (no
Collector), as ``OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318`` does. Jaeger takes traces only:
with metrics on (every 0.5 s, so several exports fail), one line, once, says so and names
``OTEL_METRICS_EXPORTER=none``; with that setting, no line at all. The traces arrive either way."""

from __future__ import annotations

import json

import pytest

from fault_kit import run_job
from real_backends import Jaeger, exported, job_environment, replay_spool, spans_by_trace, wait_for_traces

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def jaeger(tmp_path_factory):
    service = Jaeger(tmp_path_factory.mktemp("jaeger")).start()
    try:
        yield service
    finally:
        service.stop()


@pytest.mark.parametrize("metrics", ["otlp", "none"])
def test_a_job_sending_straight_to_jaeger_says_once_that_it_takes_no_metrics(jaeger, tmp_path, metrics):
    service = f"direct-{metrics}"
    env = job_environment(tmp_path, f"http://127.0.0.1:{jaeger.otlp_http_port}", f"run-{metrics}", service,
                          OTEL_METRICS_EXPORTER=metrics, OTEL_METRIC_EXPORT_INTERVAL="500")
    out = run_job(["--steps", "40", "--step-sleep", "0.05"], env)
    assert out.returncode == 0, out.stderr[-3000:]
    said = [line for line in out.stderr.splitlines() if "warning" in line]
    if metrics == "otlp":
        assert len(said) == 1, out.stderr
        assert "metrics not delivered (HTTP 404" in said[0] and "OTEL_METRICS_EXPORTER=none" in said[0], said
    else:
        assert said == [], out.stderr
    replay_spool(tmp_path, env)
    expected = spans_by_trace(exported([tmp_path / "prof"], tmp_path / "expected.pb", f"run-{metrics}"))
    assert expected and json.loads((tmp_path / "prof" / "rank-0.json").read_text())["steps"] >= 39
    wait_for_traces(jaeger, service, expected)
