"""The ``compiled`` section (``otel_profiler.analysis.attribution.compiled``) against plain recounts
from the raw trace JSON: the repository's compiled traces (a Triton kernel launched by
``cuLaunchKernel``; a B200 trace with a recompiled region and Python frames; a torch 2.0 trace of
``CompiledFunction``/``CompiledFunctionBackward`` only), an eager trace, and a CPU ``torch.compile``
run made here (training steps, a graph break, a recompilation provoked by a new input shape).

Each recount works on the JSON events directly, as the definitions read: a region is a
``Torch-Compiled Region``/``CompiledFunctionBackward`` range or an outermost other compiled marker;
a kernel belongs to the innermost region on its launch call's thread that holds the call.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

import pytest

from cuda_tracer.loading import load_profile
from cuda_tracer.model.correlate import correlate
from otel_profiler.analysis.attribution.compiled import (FALLBACK_OPS, compiled, known_ops, parse_kernel_name,
                                                         split_fused_ops)
from otel_profiler.analysis.attribution.operators import COMPILED_MARKERS

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
TRITON = TRACES / "hta" / "triton_example" / "triton_example.json.gz"
B200 = TRACES / "tracelens" / "b200" / "eager_trace.json.gz"
TORCH_2_0 = TRACES / "hta" / "negative_queue_length_values_check" / "rank0.json.gz"
EAGER = TRACES / "hta" / "critical_path" / "alexnet" / "benchmark_result_2869224_1695835535_trace.json.gz"
CPU_SIDE = ("cpu_op", "user_annotation")
THREAD_CATS = (*CPU_SIDE, "python_function", "cuda_runtime", "cuda_driver")
INDUCTOR_RANGE = re.compile(r"(graph_\d+_)?(cpp|triton)_.*")


def events(path: Path) -> list[dict[str, Any]]:
    opener: Any = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def section(path: Path) -> dict[str, Any]:
    batch = load_profile([str(path)]).batch()
    return compiled(batch, correlate(batch))


def holds(outer: dict, ts: float, end: float | None = None) -> bool:
    return outer["ts"] <= ts and (end if end is not None else ts) <= outer["ts"] + outer["dur"]


def same_thread(a: dict, b: dict) -> bool:
    return (a["pid"], a["tid"]) == (b["pid"], b["tid"])


def within(inner: dict, outer: dict) -> bool:
    """``inner`` runs inside ``outer`` (another range of its thread)."""
    return inner is not outer and same_thread(inner, outer) and \
        holds(outer, inner["ts"], inner["ts"] + inner["dur"])


def heads(evs: list[dict]) -> list[dict]:
    """Region ranges: Torch-Compiled Regions, compiled backwards, and markers in no other marker."""
    markers = [e for e in evs if e.get("cat") in CPU_SIDE and e["name"].startswith(COMPILED_MARKERS)]
    return [m for m in markers if m["name"].startswith(("Torch-Compiled Region", "CompiledFunctionBackward"))
            or not any(within(m, o) for o in markers)]


def label(name: str) -> str:
    return name.split(": ", 1)[1] if name.startswith("Torch-Compiled Region") else name


def innermost(ranges: list[dict], e: dict) -> dict | None:
    inside = [r for r in ranges if same_thread(r, e) and r["ts"] <= e["ts"] < r["ts"] + r["dur"]]
    return max(inside, key=lambda r: (r["ts"], -r["dur"])) if inside else None


def recount(evs: list[dict]) -> dict[str, Any]:
    """The section's numbers counted on the JSON events."""
    regions = heads(evs)
    rows: dict[str, dict] = {}
    for r in regions:
        row = rows.setdefault(label(r["name"]), {"calls": 0, "cpu_us": 0.0, "kernels": {}, "cpu_kernels": {}})
        row["calls"] += 1
        row["cpu_us"] += r["dur"]
    launches = {e["args"]["correlation"]: e for e in evs if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and "correlation" in e.get("args", {})}
    total = inside = triton = 0.0
    for k in (e for e in evs if e.get("cat") == "kernel"):
        total += k["dur"]
        launch = launches.get(k["args"].get("correlation"))
        region = innermost(regions, launch) if launch else None
        if region is None:
            continue
        inside += k["dur"]
        triton += k["dur"] if k["name"].startswith("triton_") else 0.0
        calls, us = rows[label(region["name"])]["kernels"].get(k["name"], (0, 0.0))
        rows[label(region["name"])]["kernels"][k["name"]] = (calls + 1, us + k["dur"])
    for e in evs:
        if e.get("cat") in CPU_SIDE and INDUCTOR_RANGE.fullmatch(e["name"]):
            region = innermost(regions, e)
            if region is not None:
                table = rows[label(region["name"])]["cpu_kernels"]
                calls, us = table.get(e["name"], (0, 0.0))
                table[e["name"]] = (calls + 1, us + e["dur"])
    lookups = [e["dur"] for e in evs if e["name"] == "TorchDynamo Cache Lookup"]
    return {"rows": rows, "kernel_us": total, "triton_us": triton, "extern_us": inside - triton,
            "outside_us": total - inside, "lookups": (len(lookups), sum(lookups))}


def python_time(evs: list[dict]) -> float:
    """Time inside outermost regions whose innermost open event (the last begun) is a Python frame,
    found by checking every stretch between two event boundaries."""
    regions = heads(evs)
    tops = [r for r in regions if not any(within(r, o) for o in regions)]
    total = 0.0
    for r in tops:
        end = r["ts"] + r["dur"]
        inside = [(e["ts"], min(e["ts"] + e["dur"], end), i, e["cat"] == "python_function")
                  for i, e in enumerate(evs)
                  if e.get("cat") in THREAD_CATS and same_thread(e, r) and r["ts"] <= e["ts"] < end]
        cuts = sorted({t for s, e, _, _ in inside for t in (s, e)})
        for a, b in zip(cuts, cuts[1:]):
            open_ = [(s, -e, i, py) for s, e, i, py in inside if s <= a and e > a]
            if open_ and max(open_)[3]:
                total += b - a
    return total


def check_against_recount(out: dict[str, Any], expected: dict[str, Any]) -> None:
    rows = {r["name"]: r for r in out["regions"]}
    assert set(rows) == set(expected["rows"])
    for name, want in expected["rows"].items():
        got = rows[name]
        assert got["calls"] == want["calls"]
        assert got["cpu_us"] == pytest.approx(want["cpu_us"], rel=1e-9, abs=1e-3)
        assert {k["raw_name"]: k["calls"] for k in got["kernels"]} == \
            {n: c for n, (c, _) in want["kernels"].items()}
        for k in got["kernels"]:
            assert k["gpu_us"] == pytest.approx(want["kernels"][k["raw_name"]][1], rel=1e-9, abs=1e-3)
            assert k["triton"] == k["raw_name"].startswith("triton_")
        assert got["gpu_us"] == pytest.approx(sum(us for _, us in want["kernels"].values()), abs=1e-3)
        assert {k["name"]: k["calls"] for k in got["cpu_kernels"]} == \
            {n: c for n, (c, _) in want["cpu_kernels"].items()}
        for k in got["cpu_kernels"]:
            assert k["cpu_us"] == pytest.approx(want["cpu_kernels"][k["name"]][1], rel=1e-9, abs=1e-3)
        gpu = [k["gpu_us"] for k in got["kernels"]]
        assert gpu == sorted(gpu, reverse=True)
    assert [r["gpu_us"] for r in out["regions"]] == sorted((r["gpu_us"] for r in out["regions"]), reverse=True)
    assert out["triton_gpu_us"] == pytest.approx(expected["triton_us"], abs=1e-3)
    assert out["extern_gpu_us"] == pytest.approx(expected["extern_us"], abs=1e-3)
    assert out["outside_gpu_us"] == pytest.approx(expected["outside_us"], abs=1e-3)
    count, us = expected["lookups"]
    assert out["dynamo"]["cache_lookups"]["count"] == count
    assert out["dynamo"]["cache_lookups"]["cpu_us"] == pytest.approx(us, abs=1e-3)


@pytest.mark.parametrize("path", [TRITON, B200, TORCH_2_0], ids=["triton_example", "b200", "torch_2_0"])
def test_gpu_traces_against_a_recount(path: Path) -> None:
    evs = events(path)
    out = section(path)
    expected = recount(evs)
    assert expected["rows"] and expected["kernel_us"] - expected["outside_us"] > 0  # kernels in regions
    check_against_recount(out, expected)
    for row in out["regions"]:
        for k in row["kernels"]:
            if k["raw_name"].startswith("triton_") and "_fused_" in k["raw_name"]:
                # ops text between "_fused_" and the trailing number, ops of one word each split plainly
                text = k["raw_name"].split("_fused_", 1)[1].rsplit("_", 1)[0]
                assert "_".join(k["fused_ops"]) == text
                assert all(op in known_ops() for op in k["fused_ops"])


def test_triton_example_kernel_is_triton_and_in_its_region() -> None:
    evs = events(TRITON)
    out = section(TRITON)
    kernels = [e for e in evs if e.get("cat") == "kernel"]
    region = [e for e in evs if e["name"].startswith("Torch-Compiled Region")]
    assert len(out["regions"]) == len(region) == 1
    assert out["regions"][0]["name"] == region[0]["name"].rsplit(" ", 1)[1]
    (row,) = out["regions"][0]["kernels"]
    assert row["raw_name"] == kernels[0]["name"] and row["triton"] and row["kind"] == "pointwise"
    assert out["triton_gpu_us"] == pytest.approx(sum(k["dur"] for k in kernels), abs=1e-3)
    assert out["extern_gpu_us"] == 0.0 and out["outside_gpu_us"] == 0.0
    assert "python_us_in_regions" not in out["dynamo"]  # no python_function events


def test_b200_recompiled_region_and_python_time() -> None:
    evs = events(B200)
    out = section(B200)
    named = {label(e["name"]) for e in evs if e["name"].startswith("Torch-Compiled Region")}
    named |= {m.group(1) for e in evs for m in re.finditer(r"compile_id=([^\s,]+)", e["name"])}
    ids = [i for i in named if int(i.split("/")[1]) > 0]
    assert ids and out["dynamo"]["recompilations"] == {"count": len(set(ids)), "ids": sorted(set(ids))}
    assert out["dynamo"]["python_us_in_regions"] == pytest.approx(python_time(evs), rel=1e-3, abs=0.5)
    assert 0 < out["dynamo"]["python_us_in_regions"] < sum(r["cpu_us"] for r in out["regions"])


def test_backward_inside_a_region_is_a_region_of_its_own(tmp_path: Path) -> None:
    """Rule: a compiled backward run inside a compiled frame (a compiled training step whose
    ``backward()`` breaks the graph) is its own region, the innermost, not part of the frame's."""
    def op(name: str, ts: float, dur: float, ext: int, cat: str = "cpu_op", **args: Any) -> dict:
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur,
                "args": {"External id": ext, **args}}

    def kernel(name: str, ts: float, dur: float, correlation: int) -> dict:
        return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
                "args": {"correlation": correlation, "device": 0, "stream": 7}}

    trace = [op("Torch-Compiled Region: 0/0", 1000, 100, 1), op("CompiledFunction", 1005, 30, 2),
             op("triton_poi_fused_add_0", 1010, 10, 3),
             op("cuLaunchKernel", 1012, 5, 3, "cuda_driver", correlation=10),
             kernel("triton_poi_fused_add_0", 1020, 4, 10),
             op("CompiledFunctionBackward", 1050, 45, 4), op("aten::mm", 1055, 20, 5),
             op("cudaLaunchKernel", 1056, 5, 5, "cuda_runtime", correlation=11),
             kernel("ampere_sgemm_128x64_tn", 1070, 8, 11),
             op("aten::add", 1200, 10, 6), op("cudaLaunchKernel", 1201, 5, 6, "cuda_runtime", correlation=12),
             kernel("vectorized_elementwise_kernel", 1210, 3, 12)]
    path = tmp_path / "backward_in_region.json"
    path.write_text(json.dumps({"traceEvents": trace}))
    expected = recount(events(path))
    assert set(expected["rows"]) == {"0/0", "CompiledFunctionBackward"}
    out = section(path)
    check_against_recount(out, expected)
    assert {r["name"]: r["pass"] for r in out["regions"]} == \
        {"0/0": "forward", "CompiledFunctionBackward": "backward"}


def test_eager_trace_has_no_regions() -> None:
    evs = events(EAGER)
    out = section(EAGER)
    assert not any(e["name"].startswith(COMPILED_MARKERS) for e in evs)
    assert out["regions"] == []
    assert out["triton_gpu_us"] == 0.0 and out["extern_gpu_us"] == 0.0
    kernel_us = sum(e["dur"] for e in evs if e.get("cat") == "kernel")
    assert kernel_us > 0 and out["outside_gpu_us"] == pytest.approx(kernel_us, abs=1e-3)
    assert out["dynamo"] == {"cache_lookups": {"count": 0, "cpu_us": 0.0},
                             "compiles": {"count": 0, "cpu_us": 0.0, "ids": []},
                             "recompilations": {"count": 0, "ids": []}}


# ---------------------------------------------------------------------------- fused op names

def check_real_names(paths: list[Path]) -> None:
    """Every Inductor kernel name in the traces: the ops joined back give the name's ops text, each
    is a known op, they are ascending and distinct (Inductor sorts them), and the built-in list
    splits them as torch's list does."""
    names = {e["name"] for path in paths for e in events(path)
             if INDUCTOR_RANGE.fullmatch(e["name"]) and "_fused_" in e["name"]}
    parsed_names = {name: parse_kernel_name(name) for name in names}
    assert any(len(op.split("_")) > 1 for p in parsed_names.values() if p for op in p.fused_ops)
    for name, parsed in parsed_names.items():
        assert parsed is not None and parsed.sure
        assert parsed.triton == ("triton_" in name) and (parsed.kind == "cpp") == ("cpp_" in name)
        assert "_".join(parsed.fused_ops) == name.split("_fused_", 1)[1].rsplit("_", 1)[0]
        assert all(op in known_ops() for op in parsed.fused_ops)
        assert list(parsed.fused_ops) == sorted(set(parsed.fused_ops))
        assert split_fused_ops("_".join(parsed.fused_ops), FALLBACK_OPS)[0] == parsed.fused_ops


def test_fused_ops_of_real_triton_names() -> None:
    check_real_names([TRITON, B200])


@pytest.mark.slow
def test_fused_ops_of_real_cpp_names(cpu_run: dict[str, Any]) -> None:
    check_real_names([cpu_run["train"], cpu_run["shapes"]])


@pytest.mark.parametrize("name, kind, ops, sure, rule", [
    ("triton_red_fused_add_mean_mul_pow_rsqrt_0", "reduction", ["add", "mean", "mul", "pow", "rsqrt"], True,
     "one-word ops split at each underscore; 'red' is a reduction"),
    ("triton_poi_fused__to_copy_add_0", "pointwise", ["_to_copy", "add"], True,
     "a leading underscore belongs to the op name that follows"),
    ("triton_per_fused_native_layer_norm_native_layer_norm_backward_7", "persistent_reduction",
     ["native_layer_norm", "native_layer_norm_backward"], True, "known names with underscores stay whole"),
    ("triton_tem_fused_convolution_backward_12", "template", ["convolution_backward"], True,
     "'backward' is no op: convolution_backward is one name"),
    ("triton_poi_fused_index_put_0", "pointwise", ["index_put"], True,
     "index, put and index_put are all ops: fewest names wins"),
    ("triton_poi_fused_add_zzz_custom_op_mul_3", "pointwise", ["add", "zzz_custom_op", "mul"], False,
     "unknown pieces between known names stay one name, and the name is marked unsure"),
    ("triton_poi__0", "pointwise", [], True, "descriptive names off: no ops"),
    ("triton__0d1d2d", "unknown", [], True, "torch 2.0 names carry no category and no ops"),
    ("cpp_fused_sum_1", "cpp", ["sum"], True, "C++ kernels"),
    ("graph_3_cpp_fused__softmax_exp_0", "cpp", ["_softmax", "exp"], True, "C++ kernel ranges' graph prefix"),
])
def test_fused_ops_of_constructed_names(name: str, kind: str, ops: list[str], sure: bool, rule: str) -> None:
    parsed = parse_kernel_name(name)
    assert parsed is not None, rule
    assert (parsed.kind, list(parsed.fused_ops), parsed.sure) == (kind, ops, sure), rule
    assert parsed.triton == name.startswith("triton_"), rule


def test_names_inductor_did_not_make() -> None:
    for name in ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align4>(Params)",
                 "ampere_sgemm_128x64_tn", "aten::add", "Memcpy HtoD (Pageable -> Device)"):
        assert parse_kernel_name(name) is None


# ---------------------------------------------------------------------------- a CPU torch.compile run

STEPS = 3
NEW_SHAPE_STEPS = 2


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One model compiled once (default backend, ``dynamic=False``, C++ kernel ranges recorded):
    ``train``: STEPS training steps profiled with Python stacks; ``shapes``: STEPS steps, then
    NEW_SHAPE_STEPS with a new batch size (a recompilation inside the window) and calls of a
    function with a graph break."""
    torch = pytest.importorskip("torch")
    import torch._inductor.config as inductor_config
    from torch.profiler import ProfilerActivity, profile

    folder = tmp_path_factory.mktemp("compiled")
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.GELU(),
                                torch.nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def broken(x: Any) -> Any:
        y = torch.sin(x) * 2
        torch._dynamo.graph_break()
        return torch.cos(y) + 1

    with inductor_config.patch({"cpp.enable_kernel_profile": True}):
        step_fn = torch.compile(model, dynamic=False)
        broken_fn = torch.compile(broken, dynamic=False)

        def step(rows: int) -> None:
            optimizer.zero_grad()
            step_fn(torch.randn(rows, 16)).sum().backward()
            optimizer.step()

        step(8)
        broken_fn(torch.randn(8))
        with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
            for _ in range(STEPS):
                step(8)
        prof.export_chrome_trace(str(folder / "train.json"))
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(STEPS):
                step(8)
                broken_fn(torch.randn(8))
            for _ in range(NEW_SHAPE_STEPS):
                step(5)
        prof.export_chrome_trace(str(folder / "shapes.json"))
    return {"train": folder / "train.json", "shapes": folder / "shapes.json"}


@pytest.mark.slow
def test_cpu_regions_calls_and_times(cpu_run: dict[str, Any]) -> None:
    evs = events(cpu_run["train"])
    out = section(cpu_run["train"])
    check_against_recount(out, recount(evs))
    rows = {r["name"]: r for r in out["regions"]}
    forward = [r for r in out["regions"] if r["pass"] == "forward"]
    assert len(forward) == 1 and forward[0]["calls"] == STEPS  # one compiled frame, called each step
    assert rows["CompiledFunctionBackward"]["calls"] == STEPS
    assert out["dynamo"]["cache_lookups"]["count"] == STEPS
    assert out["dynamo"]["compiles"]["count"] == 0 and out["dynamo"]["recompilations"]["count"] == 0
    for row in out["regions"]:  # C++ kernels recorded, no GPU
        assert row["gpu_us"] == 0.0 and row["kernels"] == [] and row["cpu_kernels"]
        assert all(k["kind"] == "cpp" and not k["triton"] and k["fused_ops"] for k in row["cpu_kernels"])
        calls = [e for e in evs if e["name"].startswith("## Call CompiledFxGraph ")
                 and label((innermost(heads(evs), e) or {"name": ""})["name"]) == row["name"]]
        assert {g["name"] for g in row["graphs"]} == {e["name"].split()[3] for e in calls}
        for g in row["graphs"]:
            raw = [e for e in calls if e["name"].split()[3] == g["name"]]
            kernels = [e for e in evs if INDUCTOR_RANGE.fullmatch(e["name"]) and any(within(e, r) for r in raw)]
            assert g["calls"] == len(raw) and g["cpu_us"] == pytest.approx(sum(e["dur"] for e in raw), abs=1e-3)
            assert g["kernel_cpu_us"] == pytest.approx(sum(e["dur"] for e in kernels), abs=1e-3)
            assert 0 < g["kernel_cpu_us"] and g["extern_cpu_us"] + g["kernel_cpu_us"] <= g["cpu_us"]


@pytest.mark.slow
def test_cpu_python_time_in_regions(cpu_run: dict[str, Any]) -> None:
    evs = events(cpu_run["train"])
    out = section(cpu_run["train"])
    assert any(e.get("cat") == "python_function" for e in evs)
    expected = python_time(evs)
    assert expected > 0
    assert out["dynamo"]["python_us_in_regions"] == pytest.approx(expected, rel=1e-3, abs=0.5)


@pytest.mark.slow
def test_cpu_recompilation_and_graph_break(cpu_run: dict[str, Any]) -> None:
    evs = events(cpu_run["shapes"])
    out = section(cpu_run["shapes"])
    check_against_recount(out, recount(evs))
    rows = {r["name"]: r for r in out["regions"]}
    ran = {label(e["name"]) for e in evs if e["name"].startswith("Torch-Compiled Region")}
    recompiled = sorted(i for i in ran if int(i.split("/")[1]) > 0)
    assert len(recompiled) == 1  # the new batch size, and nothing else
    assert rows[recompiled[0]]["calls"] == NEW_SHAPE_STEPS
    assert out["dynamo"]["recompilations"] == {"count": 1, "ids": recompiled}
    compiles = [e for e in evs if e["name"].startswith("_compile.") and "compile_inner" in e["name"]]
    assert out["dynamo"]["compiles"]["count"] == len(compiles) == 1  # it ran inside the window
    assert out["dynamo"]["compiles"]["cpu_us"] == pytest.approx(compiles[0]["dur"], abs=1e-3)
    annotated = sorted({m.group(1) for e in evs for m in re.finditer(r"compile_id=([^\s,]+)", e["name"])})
    assert out["dynamo"]["compiles"]["ids"] == annotated and recompiled[0] in annotated
    assert out["dynamo"]["cache_lookups"]["count"] == sum(e["name"] == "TorchDynamo Cache Lookup" for e in evs)
    # the graph break: the resume frame's region runs inside the region of the frame that broke
    regions = heads(evs)
    pairs = {(label(r["name"]), label(o["name"])) for r in regions for o in regions if within(r, o)}
    assert len(pairs) == 1
    ((inner, outer),) = pairs
    assert rows[inner]["calls"] == rows[outer]["calls"] == STEPS
    assert rows[outer]["self_cpu_us"] == pytest.approx(rows[outer]["cpu_us"] - rows[inner]["cpu_us"], abs=1e-3)
    assert rows[inner]["self_cpu_us"] == pytest.approx(rows[inner]["cpu_us"], abs=1e-3)


def test_a_hostile_kernel_name_is_left_whole():
    """A name of more pieces than any Inductor kernel's is not split (the split's work grows with
    the square of the pieces); one of a few hundred still is."""
    from otel_profiler.analysis.attribution.compiled import MAX_SPLIT_PIECES

    long = "_".join(["add"] * (MAX_SPLIT_PIECES + 1))
    assert split_fused_ops(long) == ((long,), False)
    some = "_".join(["add", "mul"] * 20)
    ops, _ = split_fused_ops(some)
    assert "_".join(ops) == some and set(ops) == {"add", "mul"}
