"""The ``flops`` section of real GPU traces against a hand count from the raw JSON: every matrix
product's ``2·M·N·K`` (times the batch for ``bmm``) from its recorded ``Input Dims``, summed, equals
the section's GEMM FLOPs; the GPU time the section gives GEMMs equals the kernels launched under them
(kernel -> launch by correlation id -> the innermost enclosing operator on the launching thread),
and MFU equals those FLOPs over the steps' time at the device's peak."""

from __future__ import annotations

import bisect
import gzip
import json
import math

import numpy as np
import pytest

from conftest import trace
from cuda_tracer.loading import load_profile
from otel_profiler.analysis.summary import summarize
from otel_profiler.spans.build import build_spans

TRACES = ["tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz",
          "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
          "tracelens/b200/eager_trace.json.gz",
          "hta/trace_diff/control/control.json.gz"]
GEMM = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"}


def _gemm_flops(name: str, dims: list) -> float:
    """2·M·N·K of one matrix product, by hand from its inputs' shapes."""
    if name == "aten::mm":
        (m, k), (_, n) = dims[0], dims[1]
        return 2.0 * m * n * k
    if name == "aten::addmm":  # bias, mat1, mat2
        (m, k), (_, n) = dims[1], dims[2]
        return 2.0 * m * n * k
    if name == "aten::bmm":
        (b, m, k), (_, _, n) = dims[0], dims[1]
        return 2.0 * b * m * n * k
    (b, m, k), (_, _, n) = dims[1], dims[2]  # baddbmm: input, batch1, batch2
    return 2.0 * b * m * n * k


def _raw(relative: str) -> dict:
    with gzip.open(trace(relative)) as f:
        return json.load(f)


def _hand_count(data: dict) -> tuple[float, float]:
    """(GEMM FLOPs, GPU µs of the kernels launched under a GEMM operator), from the raw events."""
    events = [e for e in data["traceEvents"] if e.get("ph") == "X"]
    gemms = [e for e in events if e.get("cat") == "cpu_op" and e.get("name") in GEMM
             and (e.get("args") or {}).get("Input Dims")]
    flops = sum(_gemm_flops(e["name"], e["args"]["Input Dims"]) for e in gemms)
    by_thread: dict[tuple, list[dict]] = {}
    for e in events:
        if e.get("cat") == "cpu_op":
            by_thread.setdefault((e["pid"], e["tid"]), []).append(e)
    for ops in by_thread.values():
        ops.sort(key=lambda e: (e["ts"], -e["dur"]))
    starts_by_thread = {key: [o["ts"] for o in ops] for key, ops in by_thread.items()}
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in (e.get("args") or {})}
    gpu_us = 0.0
    for k in (e for e in events if e.get("cat") == "kernel"):
        launch = launches.get((k.get("args") or {}).get("correlation"))
        if launch is None:
            continue
        ops = by_thread.get((launch["pid"], launch["tid"]), [])
        starts = starts_by_thread.get((launch["pid"], launch["tid"]), [])
        inner = None  # the innermost operator holding the launch: the latest started that still runs
        for o in reversed(ops[:bisect.bisect_right(starts, launch["ts"])]):
            if o["ts"] + o["dur"] >= launch["ts"]:
                inner = o
                break
        if inner is not None and inner["name"] in GEMM:
            gpu_us += k["dur"]
    return flops, gpu_us


@pytest.mark.parametrize("relative", TRACES)
def test_gemm_flops_and_time_equal_a_hand_count(relative):
    summary = summarize(load_profile([str(trace(relative))]))
    gemm = summary["flops"]["by_class"]["gemm"]
    flops, gpu_us = _hand_count(_raw(relative))
    assert flops > 0
    assert math.isclose(gemm["flops"], flops, rel_tol=1e-9)
    assert math.isclose(gemm["gpu_us"], gpu_us, rel_tol=1e-3, abs_tol=0.01)


@pytest.mark.parametrize("relative", TRACES[:2])
def test_mfu_is_the_steps_flops_over_their_time_at_the_peak(relative):
    summary = summarize(load_profile([str(trace(relative))]))
    f = summary["flops"]
    steps = f["by_step"]
    assert steps and f["peak"] is not None
    gpus = sum(f["gpus"].values())
    seconds = sum(s["duration_us"] for s in steps) / 1e6
    assert math.isclose(f["mfu"], sum(s["flops"] for s in steps) / (seconds * gpus * f["peak"]["tflops"] * 1e12),
                        rel_tol=1e-9)
    assert 0 < f["mfu"] < 1


def _root_values(table, key: str) -> dict[int, float]:
    """Step number -> the attribute ``key`` on that step's root span."""
    step, column = table.attr("otel_profiler.step"), table.attr(key)
    has_step = step.present if step.present is not None else np.ones(len(table), bool)
    has = column.present if column.present is not None else np.ones(len(table), bool)
    rows = np.flatnonzero(has_step & has & (table.source_row < 0))
    return {int(step.values[r]): float(column.values[r]) for r in rows}


@pytest.mark.parametrize("relative", ["tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
                                      "hta/trace_diff/control/control.json.gz"])
def test_each_step_root_span_carries_the_steps_flops_and_mfu(relative):
    rank = load_profile([str(trace(relative))]).ranks[0]
    steps = [s for s in summarize(load_profile([str(trace(relative))]))["flops"]["by_step"] if s["flops"] > 0]
    assert steps, "a shaped trace with steps"
    table = build_spans(rank.meta, rank.batch)
    flops, mfu = _root_values(table, "otel_profiler.flops"), _root_values(table, "otel_profiler.mfu")
    assert flops == pytest.approx({s["step"]: s["flops"] for s in steps}, rel=1e-9)
    expected_mfu = {s["step"]: s["mfu"] for s in steps if s["mfu"] is not None}
    assert expected_mfu and mfu == pytest.approx(expected_mfu, rel=1e-6)
