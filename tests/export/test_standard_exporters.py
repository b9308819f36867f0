"""The standard OpenTelemetry exporter switches on a real zero-code job, against real receivers.

``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER`` (otlp, console, prometheus, none, comma lists,
unknown names), ``OTEL_EXPORTER_PROMETHEUS_HOST``/``PORT`` scraped by a real Prometheus, and
``OTEL_EXPORTER_OTLP_PROTOCOL=http/json`` read by the OTLP receiver through protobuf's json_format.
The job (``scripts/exporter_job.py``, 12 optimizer steps, hence 12 recorded steps) writes a part every
0.5 s and then waits for a hold file, so the exporter works while it runs; each test releases it once
it has seen what it waits for (or, where nothing may arrive, once the profile has a part).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from otlp_receiver import OtlpReceiver, proto_span
from prometheus_server import available, free_port, prometheus_server

pytest.importorskip("torch")
SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
STEPS = 12  # one per iteration, numbered 0-11


class Job:
    def __init__(self, tmp: Path, **env: str) -> None:
        self.hold = tmp / "release"
        self.folder = tmp / "prof"
        self.stdout_path = tmp / "stdout.txt"
        full = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH"))}
        full.update(OTEL_PROFILER_ENABLED="true", OTEL_PROFILER_PROFILE_DIR=str(self.folder),
                    OTEL_PROFILER_SIGNAL="false", OTEL_PROFILER_FLUSH_INTERVAL_S="0.5",
                    OTEL_PROFILER_STEPS="off", JOB_HOLD_FILE=str(self.hold),
                    PYTHONPATH=os.path.join(Path(__file__).resolve().parents[2], "otel_profiler",
                                            "bootstrap", "site"))
        full.update(env)
        self._out = open(self.stdout_path, "w")
        self.proc = subprocess.Popen([sys.executable, str(SCRIPTS / "exporter_job.py"), "12"], env=full,
                                     cwd=tmp, stdout=self._out, stderr=subprocess.PIPE, text=True)

    def wait_for(self, condition, what: str | Callable[[], str], timeout: float = 90) -> None:
        """Poll ``condition``; ``what`` names it in the failure (a callable: what was seen by then)."""
        deadline = time.monotonic() + timeout
        while not condition():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.release()
                pytest.fail(f"never saw {what() if callable(what) else what}; job stderr:\n{self.stderr[-3000:]}")
            time.sleep(0.2)

    def written(self) -> bool:
        return (self.folder / "rank-0.json").exists() and \
            json.loads((self.folder / "rank-0.json").read_text())["steps"] >= STEPS

    def release(self) -> None:
        self.hold.write_text("go")
        try:
            _, self.stderr = self.proc.communicate(timeout=120)
        finally:
            self.proc.kill()
            self._out.close()
        assert self.proc.returncode == 0, self.stderr[-3000:]

    @property
    def stdout(self) -> str:
        return self.stdout_path.read_text()

    stderr = ""


def lines_about(stderr: str, word: str) -> list[str]:
    return [line for line in stderr.splitlines() if word in line and "otel-profiler" in line]


def step_spans(receiver: OtlpReceiver) -> list[dict]:
    return [proto_span(s) for _, s in receiver.collected.spans() if s.name == "train.step"]


@pytest.mark.parametrize("traces, delivered", [("otlp", True), ("none", False), ("zipkin,otlp", True),
                                               ("zipkin", False)])
def test_traces_exporter_switch_against_a_real_receiver(tmp_path, traces, delivered):
    with OtlpReceiver() as receiver:
        job = Job(tmp_path, OTEL_TRACES_EXPORTER=traces, OTEL_METRICS_EXPORTER="none",
                  OTEL_EXPORTER_OTLP_ENDPOINT=receiver.http_endpoint)
        if delivered:
            job.wait_for(lambda: len(step_spans(receiver)) >= STEPS, "the step spans")
        else:
            job.wait_for(job.written, "the profile's steps")
            time.sleep(1.0)  # a part was handed over: an exporter, if one ran, has had it a while
        job.release()
        spans = step_spans(receiver)
    assert len(spans) == (STEPS if delivered else 0)
    assert json.loads((tmp_path / "prof" / "rank-0.json").read_text())["steps"] == STEPS  # always kept
    unknown = lines_about(job.stderr, "OTEL_TRACES_EXPORTER")
    assert len(unknown) == ("zipkin" in traces)
    if unknown:
        assert "'zipkin' is not supported" in unknown[0]
    assert "resourceSpans" not in job.stdout


def test_console_exporters_print_otlp_json_with_hex_ids(tmp_path):
    job = Job(tmp_path, OTEL_TRACES_EXPORTER="console", OTEL_METRICS_EXPORTER="console",
              OTEL_METRIC_EXPORT_INTERVAL="500")
    job.wait_for(lambda: "resourceSpans" in job.stdout and "resourceMetrics" in job.stdout,
                 "spans and metrics on stdout")
    job.release()
    requests = [json.loads(line) for line in job.stdout.splitlines() if line.startswith("{")]
    spans = [s for r in requests for rs in r.get("resourceSpans", []) for ss in rs["scopeSpans"]
             for s in ss["spans"]]
    assert len([s for s in spans if s["name"] == "train.step"]) == STEPS
    assert all(re.fullmatch("[0-9a-f]{32}", s["traceId"]) and re.fullmatch("[0-9a-f]{16}", s["spanId"])
               for s in spans)
    metrics = {m["name"] for r in requests for rm in r.get("resourceMetrics", [])
               for sm in rm.get("scopeMetrics", []) for m in sm.get("metrics", [])}
    assert "otel_profiler.step.duration" in metrics
    assert "job: 12 steps" in job.stdout  # the program's own output is untouched


def test_http_json_protocol_is_real_otlp_json(tmp_path):
    with OtlpReceiver() as receiver:
        job = Job(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.http_endpoint,
                  OTEL_EXPORTER_OTLP_PROTOCOL="http/json", OTEL_METRIC_EXPORT_INTERVAL="500")

        def points():
            return [p for m in receiver.collected.metrics().get("otel_profiler.step.duration", [])
                    for p in m.histogram.data_points]

        def histogram():  # of all the steps; requests of the threaded receiver may be recorded out of order
            return next((p for p in reversed(points()) if p.count == STEPS), None)

        job.wait_for(lambda: len(step_spans(receiver)) >= STEPS and histogram(),
                     lambda: f"spans and metrics ({len(step_spans(receiver))} step spans, the step histogram's "
                             f"counts {[p.count for p in points()][-20:]})")
        job.release()
        spans, point = step_spans(receiver), histogram()
        types = set(receiver.collected.content_types)
    assert types == {"application/json"}
    assert "not supported" not in job.stderr and "http/protobuf" not in job.stderr
    assert sorted(s["attrs"]["otel_profiler.step"] for s in spans) == list(range(STEPS))
    roots = {(s["trace"], s["span"]) for s in spans}
    exemplars = {(e.trace_id.hex(), e.span_id.hex()) for e in point.exemplars}
    assert exemplars and exemplars <= roots  # ids survived the JSON round trip exactly


@pytest.mark.skipif(not available(), reason="/usr/bin/prometheus missing (apt-get install prometheus)")
def test_metrics_exporter_prometheus_serves_the_standard_port_for_a_real_scrape(tmp_path):
    port = free_port()
    scrape = [{"job_name": "trainer", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}]
    with prometheus_server(scrape) as prom:
        job = Job(tmp_path, OTEL_METRICS_EXPORTER="prometheus,bogus", OTEL_TRACES_EXPORTER="none",
                  OTEL_EXPORTER_PROMETHEUS_PORT=str(port))

        def scraped() -> bool:
            got = prom.query("otel_profiler_step_duration_seconds_count")
            return bool(got) and float(got[0]["value"][1]) == STEPS

        job.wait_for(scraped, f"{STEPS} steps scraped from port {port}")
        targets = prom.targets()
        job.release()
    assert targets[0]["health"] == "up"
    (line,) = lines_about(job.stderr, "OTEL_METRICS_EXPORTER")
    assert "'bogus' is not supported" in line
