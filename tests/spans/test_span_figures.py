"""Root-span figures of the exported traces on real traces: ``otel_profiler.top_operators`` of each
``train.step`` equals a plain recount from the raw trace JSON (kernel -> launch call by correlation
id -> operator by external id, for launch calls inside the step), and
``gpu.memory.peak_allocated_bytes`` / ``peak_reserved_bytes`` equal the largest ``Total Allocated`` /
``Total Reserved`` of the GPU ``[memory]`` events inside the step."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict

import pytest

from cuda_tracer.loading import load_profile
from otel_profiler.spans.build import build_spans

from conftest import trace

QWEN = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
RESNET = "kineto_tb_plugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
OP_CATS = {"cpu_op", "user_annotation", "operator"}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "runtime", "driver"}
TOP = 5


def _expected(path) -> dict[int, dict]:
    """Per step number: {top_operators, peak_allocated, peak_reserved} recounted from the raw events."""
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    steps, ops, launches, kernels, memory = {}, {}, {}, [], []
    for e in events:
        cat, args = str(e.get("cat", "")).lower(), e.get("args") or {}
        ext = args.get("External id", args.get("external id"))
        if e.get("ph") == "X" and e["name"].startswith("ProfilerStep#"):
            steps[int(e["name"].split("#")[1])] = (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        elif e.get("ph") == "X" and cat in OP_CATS and ext is not None:
            ops[ext] = e["name"]
        elif e.get("ph") == "X" and cat in LAUNCH_CATS and "correlation" in args:
            launches[args["correlation"]] = (float(e["ts"]), ext)
        elif e.get("ph") == "X" and cat == "kernel":
            kernels.append((args.get("correlation"), float(e["dur"])))
        elif e.get("name") == "[memory]" and args.get("Device Type", 0) != 0 and "Total Allocated" in args:
            memory.append((float(e["ts"]), args["Total Allocated"], args.get("Total Reserved")))
    out = {}
    for number, (start, end) in steps.items():
        per_op: dict[str, float] = defaultdict(float)
        for corr, dur in kernels:
            ts, ext = launches.get(corr, (None, None))
            if ts is not None and start <= ts < end and ext in ops:
                per_op[ops[ext]] += dur
        inside = [m for m in memory if start <= m[0] <= end]
        out[number] = {"top": sorted(per_op.items(), key=lambda kv: -kv[1])[:TOP], "per_op": per_op,
                       "alloc": max((m[1] for m in inside), default=None),
                       "reserved": max((m[2] for m in inside), default=None)}
    return out


def _roots(path) -> dict[int, dict]:
    table = build_spans({}, load_profile([str(path)]).batch())
    attrs = {a.key: a for a in table.attrs}
    out = {}
    for i in range(len(table.name)):
        if table.names[table.name[i]] != "train.step":
            continue

        def get(key):
            a = attrs.get(key)
            if a is None or (a.present is not None and not a.present[i]):
                return None
            return table.values[a.values[i]] if a.type == "value" else int(a.values[i])
        out[get("otel_profiler.step")] = {k: get(k) for k in (
            "otel_profiler.top_operators", "otel_profiler.top_operator", "gpu.memory.peak_allocated_bytes",
            "gpu.memory.peak_reserved_bytes")}
    return out


@pytest.mark.parametrize("relative", [QWEN, RESNET])
def test_step_roots_carry_top_operators_and_memory_peak(relative):
    path = trace(relative)
    expected, roots = _expected(path), _roots(path)
    assert roots.keys() == expected.keys()
    for number, root in roots.items():
        e = expected[number]
        got = root["otel_profiler.top_operators"]
        assert got is not None and len(got) == len(e["top"]) > 0
        # same time per rank (names may swap on equal times)
        assert [e["per_op"][name] for name in got] == pytest.approx([us for _, us in e["top"]]), number
        assert root["otel_profiler.top_operator"] == got[0]
        assert root["gpu.memory.peak_allocated_bytes"] == e["alloc"]
        assert root["gpu.memory.peak_reserved_bytes"] == e["reserved"]
    if relative == QWEN:
        assert all(r["gpu.memory.peak_allocated_bytes"] > 0 for r in roots.values())
