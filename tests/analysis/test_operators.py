"""The operator view on real traces: kernel time attributed to operators, checked against a plain
recount from the raw trace JSON through correlation and external ids."""

from __future__ import annotations

import bisect
import gzip
import json
from collections import defaultdict

import numpy as np
import pytest

from cuda_tracer.model.events import Kind
from cuda_tracer.loading import load_profile
from otel_profiler.analysis.attribution.operators import STEP_ROW, operator_rows, operators, parents
from otel_profiler.analysis.summary import summarize
from otel_profiler.report.console import render_table

from conftest import ALL_TRACES, trace

# Traces whose launch calls carry the external id of the operator that issued them.
BY_EXTERNAL_ID = ["hta/nccl_parser_config/nccl_data.json.gz",
                  "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
                  "kineto_tb_plugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
                  "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz",
                  "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"]
OP_CATS = {"cpu_op", "user_annotation", "operator"}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "runtime", "driver"}


def _recount(path) -> dict[str, float]:
    """Kernel µs per operator name: kernel -> launch call with the same correlation id -> operator
    with the launch call's external id."""
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    ops, launches, kernels = {}, {}, []
    for e in events:
        cat = str(e.get("cat", "")).lower()
        args = e.get("args") or {}
        if e.get("ph") != "X":
            continue
        ext = args.get("External id", args.get("external id"))  # older traces: lower case
        if cat in OP_CATS and ext is not None:
            ops[ext] = STEP_ROW if e["name"].startswith("ProfilerStep#") else e["name"]
        elif cat in LAUNCH_CATS and "correlation" in args:
            launches[args["correlation"]] = ext
        elif cat == "kernel":
            kernels.append((args.get("correlation"), float(e["dur"])))
    out: dict[str, float] = defaultdict(float)
    for correlation, dur in kernels:
        ext = launches.get(correlation)
        if ext in ops:
            out[ops[ext]] += dur
    return out


@pytest.mark.parametrize("relative", BY_EXTERNAL_ID)
def test_operator_gpu_time_equals_recount_through_external_ids(relative):
    path = trace(relative)
    view = operators(load_profile([str(path)]).batch())
    expected = _recount(path)
    got = {r["name"]: r["self_gpu_us"] for r in view["by_name"] if r["self_gpu_us"]}
    assert set(got) == set(expected)
    for name, us in expected.items():
        assert got[name] == pytest.approx(us, rel=1e-6, abs=1e-3), name
    assert view["attributed_by"]["enclosing_operator"] == 0
    assert sum(got.values()) <= view["kernel_total_us"] + 1e-6


@pytest.mark.parametrize("path", ALL_TRACES, ids=lambda p: p.name)
def test_operator_times_are_consistent(path):
    summary = summarize(load_profile([str(path)]))
    view = summary["operators"]
    assert view["kernel_total_us"] == pytest.approx(summary["kernels"]["total_us"])
    attributed = sum(r["self_gpu_us"] for r in view["by_name"])
    assert attributed <= view["kernel_total_us"] * (1 + 1e-9) + 1e-6
    assert attributed == pytest.approx(view["attributed_us"], abs=1e-3)
    lost = view["unattributed"]
    assert attributed + lost["no_launch"]["gpu_us"] + lost["no_operator"]["gpu_us"] == \
        pytest.approx(view["kernel_total_us"], abs=1e-3)
    for r in view["by_name"]:
        assert 0 <= r["self_cpu_us"] <= r["total_cpu_us"] + 1e-6
        assert r["self_gpu_us"] <= r["total_gpu_us"] + 1e-6
        assert sum(k["gpu_us"] for k in r["top_kernels"]) <= r["self_gpu_us"] + 1e-6
    assert sum(g["gpu_us"] for g in view["regions"]) <= view["kernel_total_us"] + 1e-6


def test_launches_with_their_own_ids_fall_back_to_the_enclosing_operator():
    """df_index_resolver's launch calls carry their correlation id as external id: kernels go to
    the innermost operator whose time span holds the launch, on its thread."""
    path = trace("hta/df_index_resolver/df_index_resolver.json.gz")
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")]
    by_thread = defaultdict(list)
    for e in ops:
        by_thread[(e["pid"], e["tid"])].append((float(e["ts"]), -float(e["dur"]), e["name"]))
    for spans in by_thread.values():
        spans.sort()
    starts = {key: [s[0] for s in spans] for key, spans in by_thread.items()}
    expected: dict[str, float] = defaultdict(float)
    for k in (e for e in events if e.get("cat") == "kernel"):
        call = launches[k["args"]["correlation"]]
        t, key = float(call["ts"]), (call["pid"], call["tid"])
        spans = by_thread[key]
        i = bisect.bisect_right(starts[key], t) - 1
        while spans[i][0] - spans[i][1] < t:  # the latest-starting operator that holds the call
            i -= 1
        expected[spans[i][2]] += float(k["dur"])
    view = operators(load_profile([str(path)]).batch())
    got = {r["name"]: r["self_gpu_us"] for r in view["by_name"] if r["self_gpu_us"]}
    assert view["attributed_by"]["enclosing_operator"] == 19370
    assert set(got) == set(expected)
    for name, us in expected.items():
        assert got[name] == pytest.approx(us, rel=1e-6), name
    compiled = {r["name"] for r in view["regions"] if r["kind"] == "compiled"}
    assert {"CompiledFunction", "CompiledFunctionBackward"} <= compiled


def test_compiled_region_holds_its_triton_kernel():
    view = operators(load_profile([str(trace("hta/triton_example/triton_example.json.gz"))]).batch())
    region = view["regions"][0]
    assert region["name"].startswith("Torch-Compiled Region") and region["kind"] == "compiled"
    assert region["top_kernels"][0]["name"] == "triton_poi_fused_add_cos_sin_0"
    outer = next(r for r in view["by_name"] if r["name"] == region["name"])
    assert outer["self_gpu_us"] == 0 and outer["total_gpu_us"] == pytest.approx(region["gpu_us"])


def test_summary_table_shows_operators():
    summary = summarize(load_profile([str(trace(BY_EXTERNAL_ID[1]))]))
    text = render_table(summary, top=5)
    rows = summary["operators"]["by_name"]
    ops, ranges = [r for r in rows if "range" not in r], [r for r in rows if "range" in r]
    assert f"== Operators (5 of {len(ops)} names;" in text and ops[0]["name"] in text
    assert ranges and f"== torch's own ranges ({min(5, len(ranges))}" in text
    operator_table = text.split("== Operators")[1].split("\n\n")[0]
    assert not any(r["name"] in line for r in ranges for line in operator_table.splitlines()[3:])  # not operators
    assert {r["range"] for r in ranges} <= {"step", "optimizer", "data", "compiled", "distributed"}


def _parents_by_stack(batch, ops, points):
    """The nesting found the plain way: a stack per thread, events in start order."""
    rows = np.concatenate([ops, points])
    start = batch.start_ns[rows]
    end = np.concatenate([batch.end_ns[ops], start[len(ops):]])
    is_point = np.r_[np.zeros(len(ops), bool), np.ones(len(points), bool)]
    order = np.lexsort((is_point, -end, start, batch.tid[rows], batch.pid[rows], batch.rank[rows]))
    out = np.full(len(rows), -1, np.int64)
    stack, thread = [], None
    for k in order.tolist():
        key = (int(batch.rank[rows[k]]), int(batch.pid[rows[k]]), int(batch.tid[rows[k]]))
        if key != thread:
            stack, thread = [], key
        while stack and end[stack[-1]] <= start[k]:
            stack.pop()
        if stack and end[k] <= end[stack[-1]]:
            out[k] = stack[-1]
        if not is_point[k]:
            stack.append(k)
    return out[:len(ops)], out[len(ops):]


@pytest.mark.parametrize("path", ALL_TRACES, ids=lambda p: p.name)
def test_nesting_equals_a_stack_walk(path):
    batch = load_profile([str(path)]).batch()
    ops = operator_rows(batch)
    launches = np.flatnonzero(np.isin(batch.kind, [Kind.RUNTIME, Kind.DRIVER]))
    got_ops, got_points = parents(batch, ops, launches)
    want_ops, want_points = _parents_by_stack(batch, ops, launches)
    assert (got_ops == want_ops).all()
    assert (got_points == want_points).all()
