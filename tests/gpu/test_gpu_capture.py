"""GPU checks of the live sources (Kineto through torch.profiler, CUPTI through cupti-python).

Skipped where no CUDA GPU is present. Each capture runs in its own process (tests/gpu/capture.py),
because only one CUPTI subscriber may exist per process. ``run_gpu_checks.sh`` runs the captures
once and points ``GPU_CHECK_DIR`` at their results; without it this module runs them itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_env import cuda_available

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not cuda_available(), reason="no CUDA GPU here")]

HERE = Path(__file__).resolve().parent
EXPECTED_COPIES = {"Memcpy HtoD (Pinned -> Device)", "Memcpy HtoD (Pageable -> Device)",
                   "Memcpy DtoH (Device -> Pinned)", "Memcpy DtoH (Device -> Pageable)"}
SOURCES = ["kineto", "kineto_live", "cupti"]
SLACK_NS = 5_000_000  # GPU ops must fall inside the captured work's wall-clock window ± 5 ms


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    given = os.environ.get("GPU_CHECK_DIR")
    if given:
        return Path(given)
    out = tmp_path_factory.mktemp("gpu_checks")
    for mode in ("kineto", "cupti", "nvml"):
        subprocess.run([sys.executable, str(HERE / "capture.py"), mode, "--out", str(out)],
                       check=False, timeout=300)
    return out


@pytest.fixture(scope="module")
def results(run_dir) -> dict:
    path = run_dir / "results.json"
    assert path.exists(), f"no capture results in {run_dir}"
    return json.loads(path.read_text())


def source(results: dict, name: str) -> dict:
    assert f"{name}_error" not in results, results[f"{name}_error"]
    data = results.get(name)
    assert data is not None, f"the {name} capture wrote nothing"
    if data.get("available") is False:
        pytest.skip(f"{name}: {data['reason']}")
    if data.get("started") is False:
        pytest.fail(f"{name} did not start: {data['stats']['reason']}")
    return data


@pytest.mark.parametrize("name", SOURCES)
def test_kernels_and_launch_linkage(results, name):
    s = source(results, name)
    assert s["kernels"] >= 20, s["counts"]
    assert s["kernel_launch_linked_fraction"] >= 0.95, s
    assert s["median_launch_latency_ns"] is not None and s["median_launch_latency_ns"] > 0


@pytest.mark.parametrize("name", SOURCES)
def test_copies_both_directions_pinned_and_pageable(results, name):
    s = source(results, name)
    assert EXPECTED_COPIES <= set(s["memcpy_names"]), s["memcpy_names"]


@pytest.mark.parametrize("name", SOURCES)
def test_memset(results, name):
    s = source(results, name)
    if s["workload"]["memset_api"].startswith("none"):
        pytest.skip(f"no cudaMemset binding on this machine: {s['workload']['memset_api']}")
    assert s["workload"]["memset_bytes"] in s["memset_bytes"], s["memset_names"]


@pytest.mark.parametrize("name", SOURCES)
def test_sync_kinds(results, name):
    s = source(results, name)
    assert {"STREAM", "EVENT", "CONTEXT"} <= set(s["sync_kinds"]), s["sync_kinds"]


@pytest.mark.parametrize("name", SOURCES)
def test_timestamps_are_unix_epoch_and_inside_the_work(results, name):
    s = source(results, name)
    w = s["workload"]
    assert w["wall_start_ns"] - SLACK_NS <= s["gpu_first_start_ns"], s
    assert s["gpu_last_end_ns"] <= w["wall_end_ns"] + SLACK_NS, s


@pytest.mark.parametrize("name", SOURCES)
def test_saved_batch_loads(run_dir, results, name):
    from cuda_tracer.events import EventBatch

    s = source(results, name)
    batch = EventBatch.load(run_dir / f"{name}_capture.batch.zip")
    assert len(batch) == s["events"]


def test_cupti_enums_records_and_losses(results):
    s = source(results, "cupti")
    assert s["started"], s["stats"]["reason"]
    assert s["enum_mismatches"] == []
    assert s["records_survive_callback"] and s["snapshot_records"] > 0
    assert s["stats"]["lost_records"] == 0 and s["stats"]["cupti_dropped_records"] == 0
    assert s["counts"].get("runtime", 0) > 0


def test_cupti_nvtx_step_ranges(results):
    if "cupti_nvtx" not in results and "cupti_nvtx_error" not in results:
        pytest.skip("no capture with NVTX_INJECTION64_PATH (run_gpu_checks.sh makes one)")
    s = source(results, "cupti_nvtx")
    assert s["stats"]["nvtx_injection"] and s["started"], s["stats"]
    assert {"step 0", "step 4"} <= set(s["annotations"]), s["annotations"]
    assert s["kernels"] >= 20  # injection did not cost the rest of the capture


@pytest.mark.parametrize("name", ["overhead_kineto", "overhead_cupti"])
def test_overhead_measured(results, name):
    if name not in results:
        pytest.skip("overhead modes run only from run_gpu_checks.sh")
    data = results[name]
    if data.get("available") is False:
        pytest.skip(data["reason"])
    assert 0.5 < data["ratio"] < 1.5, data  # a sanity bound; the figure itself is the result


def test_nvml_reads_the_gpu(results):
    n = results.get("nvml")
    assert n is not None, results.get("nvml_error")
    assert n["device_count"] >= 1 and n["name"]
    assert n["memory_total_bytes"] > 1 << 30
    assert n["max_gpu_util_pct"] > 0
