"""Integration: a real Prometheus scrapes a profiled CPU training job's /metrics endpoint.

Checked through Prometheus' HTTP API: CPU series (system, process), step and profile-derived series
exist with sane values, and the step histogram's exemplars are stored and carry exactly the trace
ids that ``spans.build_spans`` gives those steps' exported spans (built here from the very batches
the job observed).
"""

from __future__ import annotations

import glob
import os
import time
from pathlib import Path

import pytest

from cuda_tracer.model.events import EventBatch
from otel_profiler.spans.build import build_spans

from metrics_job import running, wait_for
from prometheus_server import available, free_port, prometheus_server

RUN_ID = "metrics-it-run"
pytestmark = pytest.mark.skipif(not available(), reason="/usr/bin/prometheus missing (apt-get install prometheus)")


def _value(prom, expr: str) -> float:
    result = prom.query(expr)
    assert result, f"no series for {expr}"
    return float(result[0]["value"][1])


def test_prometheus_scrapes_cpu_step_and_profile_metrics(tmp_path: Path) -> None:
    port = free_port()
    job = [{"job_name": "trainer", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}]
    t_start = time.time()
    with prometheus_server(job) as prom, running(tmp_path, port, 6, RUN_ID) as proc:
        wait_for(tmp_path / "ready", proc, 120)
        assert (tmp_path / "ready").read_text() == f"http://127.0.0.1:{port}/metrics"
        wait_for(tmp_path / "done", proc, 120)
        # Wait for a scrape that has the last step, then a bit for the exemplar.
        n_steps = sum(len(EventBatch.load(p)) for p in glob.glob(str(tmp_path / "part-*.batch.zip")))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            got = prom.query('otel_profiler_step_duration_seconds_count{otel_profiler_rank="0"}')
            if got and float(got[0]["value"][1]) == n_steps:
                break
            time.sleep(0.3)
        else:
            pytest.fail(f"Prometheus never saw {n_steps} steps; targets: {prom.targets()}\n{prom.log()}")

        deadline = time.monotonic() + 120  # one scrape may time out on a busy machine: the next is up
        while prom.targets()[0]["health"] != "up" and time.monotonic() < deadline:
            time.sleep(0.3)
        assert prom.targets()[0]["health"] == "up", prom.targets()
        # CPU series.
        modes = {r["metric"]["cpu_mode"]: float(r["value"][1]) for r in prom.query("system_cpu_utilization_ratio")}
        assert {"user", "system", "idle", "iowait"} <= set(modes)
        assert all(0.0 <= v <= 1.0 for v in modes.values()) and 0.5 < sum(modes.values()) < 1.5
        user = _value(prom, 'max_over_time(process_cpu_utilization_ratio{cpu_mode="user"}[30s])')
        assert 0.05 < user <= 1.0  # the job trained on one thread of the machine's CPUs
        cores = prom.query("otel_profiler_cpu_core_utilization_ratio")
        assert len(cores) == os.cpu_count()
        assert _value(prom, "process_memory_usage_bytes") > 50e6  # torch is loaded
        assert _value(prom, "system_memory_usage_bytes") > 0
        assert _value(prom, 'system_network_io_bytes_total{network_io_direction="receive"}') >= 0
        # Step and profile-derived series.
        step_sum = _value(prom, "otel_profiler_step_duration_seconds_sum")
        assert 0.0 < step_sum < 10.0
        assert _value(prom, 'otel_profiler_events_total{otel_profiler_kind="step"}') == n_steps
        slow = _value(prom, 'otel_profiler_step_duration_seconds_bucket{le="+Inf"}')
        assert slow == n_steps
        overhead = {r["metric"]["otel_profiler_component"]: float(r["value"][1])
                    for r in prom.query("otel_profiler_overhead_time_seconds_total")}
        assert set(overhead) == {"sampler", "profile", "scrape"} and overhead["sampler"] > 0
        assert all(v < 1.0 for v in overhead.values())
        # No GPU here: no hw.* series, and no made-up GPU numbers.
        assert prom.query("hw_gpu_utilization_ratio") == []

        # Exemplars: stored, and equal to the trace ids of the steps' exported spans.
        exemplars = prom.query_exemplars("otel_profiler_step_duration_seconds_bucket",
                                         t_start - 5, time.time() + 5)
        ids = {e["labels"]["trace_id"] for series in exemplars for e in series["exemplars"]}
        assert ids, f"no exemplars stored: {exemplars}"
    step_traces = set()
    for path in sorted(glob.glob(str(tmp_path / "part-*.batch.zip"))):
        table = build_spans({"rank": 0, "run_id": RUN_ID}, EventBatch.load(path))
        roots = [i for i in range(len(table)) if table.names[table.name[i]] == "train.step"]
        step_traces |= {table.trace_hex(i) for i in roots}
    assert len(step_traces) == n_steps
    assert ids <= step_traces
    assert all(t.endswith("00000000") for t in ids)  # rank 0 in the last 8 hex digits
