"""The nn.Module hierarchy and the recorded call stacks of the operator view: on the repository's
real traces recorded with module events, each module's kernel time equals a plain recount from the
raw trace JSON (kernel -> launch call by correlation id -> innermost enclosing module event on the
launch call's thread); on a trace recorded here with torch.profiler(with_modules=True, with_stack=True) the paths are
the model's structure; call stacks equal a plain count of the ``Call stack`` args, or a plain
recount of the ``python_function`` events holding each operator's start."""

from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict
from decimal import Decimal

import pytest

from cuda_tracer.loading import load_profile
from otel_profiler.analysis.attribution.modules import PREFIX, modules
from otel_profiler.analysis.attribution.operators import STEP_ROW, TOP_STACKS
from otel_profiler.analysis.attribution.python_stacks import MAX_FRAMES
from otel_profiler.analysis.summary import summarize
from otel_profiler.report.console import render_table

from conftest import trace

MODULE_TRACES = ["tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
                 "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz",
                 "tracelens/b200/eager_trace.json.gz"]
RESNET = "kineto_tb_plugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
LAUNCH_CATS = {"cuda_runtime", "cuda_driver"}


def _events(path) -> list[dict]:
    with gzip.open(path) as f:
        return json.load(f)["traceEvents"]


def _recount(path) -> tuple[dict[str, float], float]:
    """Self kernel µs per module path, and the kernel total, from the raw events."""
    events = [e for e in _events(path) if e.get("ph") == "X"]
    mods = [e for e in events if e.get("cat") == "python_function" and e["name"].startswith(PREFIX)]

    def encloses(a, b):  # a holds b in time on the same thread
        return (a is not b and a["pid"] == b["pid"] and a["tid"] == b["tid"]
                and a["ts"] <= b["ts"] and b["ts"] + b.get("dur", 0) <= a["ts"] + a["dur"])

    def innermost(e):
        holders = [m for m in mods if encloses(m, e)]
        return min(holders, key=lambda m: (m["dur"], -m["ts"])) if holders else None

    path_of: dict[int, str] = {}

    def path(m):
        if id(m) not in path_of:
            parent = innermost(m)
            name = m["name"][len(PREFIX):]
            path_of[id(m)] = name if parent is None else f"{path(parent)}/{name}"
        return path_of[id(m)]

    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") in LAUNCH_CATS and "correlation" in e.get("args", {})}
    out: dict[str, float] = defaultdict(float)
    total = 0.0
    for k in (e for e in events if e.get("cat") == "kernel"):
        total += k["dur"]
        launch = launches.get(k["args"].get("correlation"))
        holder = innermost(dict(launch, dur=0)) if launch is not None else None
        if holder is not None:
            out[path(holder)] += k["dur"]
    return out, total


@pytest.mark.parametrize("relative", MODULE_TRACES)
def test_module_gpu_time_equals_recount(relative):
    path = trace(relative)
    view = modules(load_profile([str(path)]).batch())
    expected, total = _recount(path)
    got = {r["path"]: r["self_gpu_us"] for r in view["by_path"] if r["self_gpu_us"]}
    assert got.keys() == expected.keys()
    for p, us in expected.items():
        assert got[p] == pytest.approx(us, rel=1e-6, abs=1e-3), p
    assert view["kernel_total_us"] == pytest.approx(total, rel=1e-9)
    assert view["attributed_us"] + view["outside"]["gpu_us"] == pytest.approx(total, rel=1e-9)
    assert sum(got.values()) == pytest.approx(view["attributed_us"], rel=1e-9)


@pytest.mark.parametrize("relative", MODULE_TRACES)
def test_module_tree_totals_add_up(relative):
    view = modules(load_profile([str(trace(relative))]).batch())
    rows = {r["path"]: r for r in view["by_path"]}
    seen: set[str] = set()
    for r in view["by_path"]:  # tree order: each module after its parent
        assert r["parent"] is None or r["parent"] in seen
        seen.add(r["path"])
        below = sum(c["self_gpu_us"] for p, c in rows.items() if p == r["path"] or p.startswith(r["path"] + "/"))
        assert r["total_gpu_us"] == pytest.approx(below, rel=1e-9, abs=1e-6), r["path"]
    by_type = {t["type"]: t for t in view["by_type"]}
    assert sum(t["calls"] for t in by_type.values()) == view["calls"]
    assert sum(t["self_gpu_us"] for t in by_type.values()) == pytest.approx(view["attributed_us"])


def test_modules_of_a_model_recorded_here(tmp_path):
    torch = pytest.importorskip("torch")
    import torch.profiler as tp
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                torch.nn.Sequential(torch.nn.Linear(16, 4)))
    with tp.profile(activities=[tp.ProfilerActivity.CPU], with_modules=True, with_stack=True) as prof:
        for _ in range(3):
            model(torch.randn(4, 8)).sum().backward()
            prof.step()
    out = tmp_path / "trace.json"
    prof.export_chrome_trace(str(out))
    summary = summarize(load_profile([str(out)]))
    view = summary["operators"]["modules"]
    paths = {r["path"]: r for r in view["by_path"]}
    assert set(paths) == {"Sequential_0", "Sequential_0/Linear_0", "Sequential_0/ReLU_0",
                          "Sequential_0/Sequential_1", "Sequential_0/Sequential_1/Linear_1"}
    assert {r["calls"] for r in paths.values()} == {3}
    assert paths["Sequential_0"]["cpu_us"] >= paths["Sequential_0/Sequential_1"]["cpu_us"] > 0
    assert view["kernel_total_us"] == 0 and view["outside"]["kernels"] == 0
    assert "nn.Module hierarchy" in render_table(summary)


def test_call_stacks_equal_a_plain_count():
    path = trace(RESNET)
    expected: dict[str, Counter] = defaultdict(Counter)
    for e in _events(path):
        stack = (e.get("args") or {}).get("Call stack")
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "Operator") and stack:
            name = STEP_ROW if e["name"].startswith("ProfilerStep#") else e["name"]
            expected[name][stack] += 1
    rows = {r["name"]: r for r in summarize(load_profile([str(path)]))["operators"]["by_name"]}
    assert expected
    for name, counts in expected.items():
        got = [(";".join(c["stack"]), c["calls"]) for c in rows[name]["call_stacks"]]
        assert [c for _, c in got] == sorted(counts.values(), reverse=True)[:3], name
        assert all(counts[s] == c for s, c in got), name
    assert not any("call_stacks" in r for n, r in rows.items() if n not in expected)


@pytest.mark.parametrize("name", MODULE_TRACES)
def test_python_function_stacks_equal_a_plain_recount(name):
    """Traces of current PyTorch record Python frames as ``python_function`` events instead of a
    ``Call stack`` string: an operator's stack is then every Python event on its thread that holds
    its start (start <= op start < end), innermost (latest start, then shortest) first."""
    events = json.loads(gzip.open(trace(name)).read(), parse_float=Decimal)["traceEvents"]
    complete = [e for e in events if e.get("ph") == "X"]
    frames = defaultdict(list)
    for e in complete:
        if e.get("cat") == "python_function":
            frames[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e.get("dur", 0), e["name"]))
    expected: dict[str, Counter] = defaultdict(Counter)
    for e in complete:
        if e.get("cat") in ("cpu_op", "user_annotation"):
            held = sorted(((-s, t - s, n) for s, t, n in frames[(e["pid"], e["tid"])] if s <= e["ts"] < t))
            if held:
                op = STEP_ROW if e["name"].startswith("ProfilerStep#") else e["name"]
                expected[op][";".join(n for _, _, n in held[:MAX_FRAMES])] += 1
    rows = {r["name"]: r for r in summarize(load_profile([str(trace(name))]))["operators"]["by_name"]}
    assert sum(map(len, expected.values())) > 10
    for op, counts in expected.items():
        got = [(";".join(c["stack"]), c["calls"]) for c in rows[op]["call_stacks"]]
        assert [c for _, c in got] == sorted(counts.values(), reverse=True)[:TOP_STACKS], op
        assert all(counts[s] == c for s, c in got), op
    assert not any("call_stacks" in r for n, r in rows.items() if n not in expected)


def test_traces_without_module_events_have_no_module_view():
    summary = summarize(load_profile([str(trace(RESNET))]))
    assert summary["operators"]["modules"] == {}
    assert "nn.Module hierarchy" not in render_table(summary)
