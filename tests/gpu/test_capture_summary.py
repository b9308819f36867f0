"""The GPU check's summary code (tests/gpu/capture.py) on a real GPU trace, on any machine: what the
checks read from a capture must come out of a real GPU batch, so the one GPU run cannot fail on it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import capture  # noqa: E402  (tests/gpu/capture.py)
from conftest import trace  # noqa: E402
from cuda_tracer.model.events import EventBatch  # noqa: E402
from cuda_tracer.trace_json.files import read_trace  # noqa: E402

ALEXNET = "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"


def test_summary_of_a_real_gpu_trace(shared_traces, tmp_path):
    batch = read_trace(str(trace(ALEXNET))).batch
    s = capture.summarize(batch)
    assert json.loads(json.dumps(s)) == s  # what results.json will hold
    assert s["events"] == len(batch) and s["kernels"] == s["counts"]["kernel"] == 79
    assert s["kernel_launch_linked_fraction"] == 1.0 and s["gpu_orphans"] == 0
    assert s["kernels_with_grid_fraction"] == 1.0  # the trace's args carry grid and block
    assert s["memcpy_names"] == {"Memcpy HtoD (Pageable -> Device)": 16}
    assert min(s["memcpy_bytes"]) > 0 and {"CONTEXT", "STREAM"} <= set(s["sync_kinds"])
    assert s["gpu_first_start_ns"] < s["gpu_last_end_ns"] and s["median_launch_latency_ns"] > 0
    capture.merge_result(tmp_path, "kineto", s)
    capture.merge_result(tmp_path, "nvml", {"device_count": 1})
    assert set(json.loads((tmp_path / "results.json").read_text())) == {"kineto", "nvml"}
    batch.save(tmp_path / "kineto_capture.batch.zip")
    assert len(EventBatch.load(tmp_path / "kineto_capture.batch.zip")) == s["events"]
