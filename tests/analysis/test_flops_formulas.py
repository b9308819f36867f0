"""``analysis.flops.formulas`` against ``torch.utils.flop_counter.FlopCounterMode`` run live, on the
arguments the profiler records (CPU ops, and GPU-only ops on meta tensors), and ``analysis.flops.peaks``'
device matching on real device names."""

from __future__ import annotations

import gzip
import itertools
import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from otel_profiler.analysis.flops.formulas import (
    COMPOSITES, COUNTED, DTYPE_BYTES, OpCost, counted, dtype_of, op_cost)
from otel_profiler.analysis.flops.peaks import known_devices, peak_for

torch = pytest.importorskip("torch")
F = torch.nn.functional
aten = torch.ops.aten
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TRACES = REPO / "tests" / "data" / "traces"
META = {"device": "meta"}
_RUNS = itertools.count()


# --- helpers ----------------------------------------------------------------------------------------

def recorded(fn: Callable[[], Any], tmp_path: Path) -> list[dict]:
    """The ``cpu_op`` events of ``fn`` run under the profiler with ``record_shapes``, from its
    exported Chrome trace, in start order."""
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        fn()
    path = tmp_path / f"trace{next(_RUNS)}.json"
    prof.export_chrome_trace(str(path))
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("cat") == "cpu_op"]
    return sorted(events, key=lambda e: (e["tid"], e["ts"], -e["dur"]))


def cost(event: dict) -> OpCost | None:
    a = event["args"]
    return op_cost(event["name"], a.get("Input Dims"), a.get("Input type"), a.get("Concrete Inputs"))


def counted_events(events: list[dict]) -> Iterator[dict]:
    """The events to count: counted, with no counted event above them (the module's rule)."""
    stack: list[tuple[float, int, bool]] = []  # (end, tid, a counted event at or above)
    for e in events:
        while stack and (stack[-1][1] != e["tid"] or stack[-1][0] <= e["ts"]):
            stack.pop()
        above = bool(stack) and stack[-1][2]
        if counted(e["name"]) and not above:
            yield e
        stack.append((e["ts"] + e["dur"], e["tid"], above or counted(e["name"])))


def trace_flops(events: list[dict]) -> float:
    costs = [cost(e) for e in counted_events(events)]
    assert all(c is not None for c in costs)
    return sum(c.flops for c in costs if c is not None)


def reference_flops(fn: Callable[[], Any]) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


def first(events: list[dict], name: str) -> dict:
    return next(e for e in events if e["name"] == name)


def tensor_bytes(values: Iterable[Any]) -> int:
    total = 0
    for v in values:
        if isinstance(v, torch.Tensor):
            total += v.numel() * v.element_size()
        elif isinstance(v, (list, tuple)):
            total += tensor_bytes(v)
    return total


def rand(*shape: int, dtype: Any = torch.float32, grad: bool = False) -> Any:
    return torch.randn(*shape, dtype=dtype).requires_grad_(grad)


DTYPES = [torch.float32, torch.bfloat16]


# --- gemm ---------------------------------------------------------------------------------------------

# name -> (input shapes, the call, the operator that counts)
GEMM_CASES: dict[str, tuple[list[tuple[int, ...]], Callable[..., Any], str]] = {
    "mm": ([(8, 16), (16, 12)], torch.mm, "aten::mm"),
    "bmm": ([(3, 8, 16), (3, 16, 5)], torch.bmm, "aten::bmm"),
    "addmm": ([(12,), (8, 16), (16, 12)], lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2), "aten::addmm"),
    "baddbmm": ([(3, 8, 5), (3, 8, 16), (3, 16, 5)], lambda c, a, b: torch.baddbmm(c, a, b, beta=0.5, alpha=3),
                "aten::baddbmm"),
    "linear": ([(8, 16), (12, 16), (12,)], F.linear, "aten::addmm"),
    "linear_3d": ([(2, 8, 16), (12, 16)], F.linear, "aten::mm"),
    "matmul_3d_2d": ([(2, 8, 16), (16, 12)], torch.matmul, "aten::mm"),
    "matmul_3d_3d": ([(2, 8, 16), (2, 16, 12)], torch.matmul, "aten::bmm"),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", GEMM_CASES)
def test_gemm_flops_match_flop_counter(case: str, dtype: Any, tmp_path: Path) -> None:
    shapes, call, leaf = GEMM_CASES[case]
    tensors = [rand(*shape, dtype=dtype) for shape in shapes]
    fn = lambda: call(*tensors)  # noqa: E731
    events = recorded(fn, tmp_path)
    assert leaf in [e["name"] for e in counted_events(events)]
    assert trace_flops(events) == reference_flops(fn) > 0
    c = cost(first(events, leaf))
    assert c is not None and c.op_class == "gemm"
    assert dtype_of(first(events, leaf)["args"]["Input type"]) == {torch.float32: "fp32", torch.bfloat16: "bf16"}[dtype]
    for composite in ("aten::linear", "aten::matmul"):  # their children count
        assert all(cost(e) is None for e in events if e["name"] == composite)


def test_addbmm_counts_its_batch_of_products(tmp_path: Path) -> None:
    c, a, b = rand(8, 5), rand(3, 8, 16), rand(3, 16, 5)
    events = recorded(lambda: torch.addbmm(c, a, b), tmp_path)
    assert [e["name"] for e in counted_events(events)] == ["aten::addbmm"]  # its addmm_ children are inside
    # FlopCounterMode has no addbmm formula (it sees the CPU kernel's addmm_ calls, which it does not
    # count): the reference is the same products as one bmm.
    assert trace_flops(events) == reference_flops(lambda: torch.bmm(a, b)) > 0


# --- convolution --------------------------------------------------------------------------------------

# name -> (input shapes, the call)
CONV_CASES: dict[str, tuple[list[tuple[int, ...]], Callable[..., Any]]] = {
    "conv1d": ([(2, 4, 17), (6, 4, 3)], lambda x, w: F.conv1d(x, w, stride=2, padding=1)),
    "conv2d": ([(2, 4, 11, 9), (6, 2, 3, 3), (6,)],
               lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1, dilation=2, groups=2)),
    "conv3d": ([(1, 3, 6, 7, 8), (4, 3, 3, 2, 3)], lambda x, w: F.conv3d(x, w, stride=(1, 2, 2), padding=(1, 0, 1))),
    "conv_transpose2d": ([(2, 4, 5, 6), (4, 3, 3, 3)],
                         lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1, groups=2)),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", CONV_CASES)
def test_conv_flops_match_flop_counter(case: str, dtype: Any, tmp_path: Path) -> None:
    shapes, call = CONV_CASES[case]
    tensors = [rand(*shape, dtype=dtype) for shape in shapes]
    fn = lambda: call(*tensors)  # noqa: E731
    events = recorded(fn, tmp_path)
    assert [e["name"] for e in counted_events(events)] == ["aten::convolution"]
    assert trace_flops(events) == reference_flops(fn) > 0
    # every level of the nest (convolution > _convolution > mkldnn_convolution) reads the same cost
    top = first(events, "aten::convolution")["args"]["Input Dims"][:2]
    nest = [cost(e) for e in events if cost(e) is not None and cost(e).op_class == "conv"  # type: ignore[union-attr]
            and e["args"]["Input Dims"][:2] == top]
    assert len(nest) >= 2 and len(set(nest)) == 1


@pytest.mark.parametrize("case,weight_grad", [("conv2d", True), ("conv2d", False), ("conv_transpose1d", True)])
def test_conv_backward_flops_match_flop_counter(case: str, weight_grad: bool, tmp_path: Path) -> None:
    if case == "conv2d":
        x, w, b = rand(2, 4, 10, 10, grad=True), rand(6, 4, 3, 3, grad=weight_grad), rand(6, grad=True)
        def fn() -> None:
            F.conv2d(x, w, b, stride=2, padding=1).sum().backward()
    else:
        x, w = rand(2, 4, 9, grad=True), rand(4, 3, 3, grad=weight_grad)
        def fn() -> None:
            F.conv_transpose1d(x, w, stride=2, padding=1).sum().backward()
    events = recorded(fn, tmp_path)
    backward = first(events, "aten::convolution_backward")
    assert backward in list(counted_events(events))
    assert backward["args"]["Concrete Inputs"][10].startswith(f"[True, {weight_grad}")
    assert trace_flops(events) == reference_flops(fn) > 0


def test_grouped_conv_backward_counts_each_group_once(tmp_path: Path) -> None:
    """Groups > 1: FlopCounterMode's weight gradient ignores the groups (it counts ``groups`` times
    the work); the reference is the same convolution run group by group, each counted by it."""
    groups = 2
    x, w = rand(2, 4, 9, 9, grad=True), rand(6, 2, 3, 3, grad=True)
    events = recorded(lambda: F.conv2d(x, w, stride=2, padding=1, groups=groups).sum().backward(), tmp_path)

    def per_group() -> None:
        for xs, ws in zip(x.chunk(groups, 1), w.chunk(groups, 0)):
            F.conv2d(xs.detach().requires_grad_(), ws.detach().requires_grad_(), stride=2, padding=1).sum().backward()
    assert trace_flops(events) == reference_flops(per_group) > 0


# --- attention ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("lengths", [(64, 64), (48, 80)])
def test_cpu_attention_flops_match_flop_counter(dtype: Any, causal: bool, lengths: tuple[int, int],
                                                tmp_path: Path) -> None:
    lq, lk = lengths
    q, k, v = rand(2, 3, lq, 32, dtype=dtype, grad=True), rand(2, 3, lk, 32, dtype=dtype, grad=True), \
        rand(2, 3, lk, 32, dtype=dtype, grad=True)
    grad = rand(2, 3, lq, 32, dtype=dtype)
    events = recorded(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal).backward(grad), tmp_path)
    fwd, bwd = (first(events, f"aten::_scaled_dot_product_flash_attention_for_cpu{s}") for s in ("", "_backward"))
    assert cost(first(events, "aten::scaled_dot_product_attention")) is None
    # FlopCounterMode has no formula for the CPU flash kernels: the references are the math backend
    # (two bmm) for the forward, and the CUDA flash backward's formula run on meta tensors.
    with sdpa_kernel(SDPBackend.MATH):
        forward = reference_flops(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    qm, km, vm = (t.detach().to("meta") for t in (q, k, v))
    out = aten._scaled_dot_product_flash_attention(qm, km, vm, 0.0, causal)
    backward = reference_flops(lambda: aten._scaled_dot_product_flash_attention_backward(
        torch.empty_like(out[0]), qm, km, vm, out[0], out[1], out[2], out[3], out[4], out[5], 0.0, causal, out[6],
        out[7]))
    assert (cost(fwd).flops, cost(bwd).flops) == (forward, backward)  # type: ignore[union-attr]
    assert trace_flops(events) == forward + backward
    assert cost(fwd).op_class == "attention"  # type: ignore[union-attr]


def meta(*shape: int, dtype: Any = torch.bfloat16) -> Any:
    return torch.empty(*shape, dtype=dtype, **META)


def _sdpa_inputs(gqa: bool = False) -> tuple[Any, Any, Any]:
    return meta(2, 4, 128, 64), meta(2, 2 if gqa else 4, 96, 64), meta(2, 2 if gqa else 4, 96, 64)


def _gpu_attention_cases() -> dict[str, tuple[Any, tuple, Callable[[], Any] | None, int]]:
    """name -> (the operator, its arguments, FlopCounterMode's reference call when it is not the call
    itself, how many outputs are data: the rest are RNG states and debug masks)."""
    q, k, v = _sdpa_inputs()
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    flash = aten._scaled_dot_product_flash_attention(q, k, v)
    eff = aten._scaled_dot_product_efficient_attention(q, k, v, None, True)
    go = torch.empty_like(flash[0])
    got = go.transpose(1, 2)
    packed = tuple(meta(2 * n, 4, 64) for n in (128, 96, 96))
    cum_q, cum_k = (torch.empty(3, dtype=torch.int32, **META) for _ in range(2))
    fa = aten._flash_attention_forward(qt, kt, vt, None, None, 128, 96, 0.0, False, False)
    ea = aten._efficient_attention_forward(qt, kt, vt, None, None, None, None, None, 0.0, 0, True)
    flash_bwd = (go, q, k, v, flash[0], flash[1], None, None, 128, 96, 0.0, False, flash[6], flash[7])
    eff_bwd = (go, q, k, v, None, eff[0], eff[1], eff[2], eff[3], 0.0, [True, True, True, False])
    return {
        "flash": (aten._scaled_dot_product_flash_attention, (q, k, v, 0.0, True), None, 2),
        "flash_gqa": (aten._scaled_dot_product_flash_attention, _sdpa_inputs(gqa=True), None, 2),
        "efficient": (aten._scaled_dot_product_efficient_attention, (q, k, v, None, True, 0.0, True), None, 2),
        "efficient_padded": (aten._scaled_dot_product_efficient_attention,  # logsumexp rows padded to 32
                             (meta(2, 4, 100, 64), k, meta(2, 4, 96, 32), None, True), None, 2),
        "cudnn": (aten._scaled_dot_product_cudnn_attention, (q, k, v, None, True, 0.0, True), None, 2),
        "flash_backward": (aten._scaled_dot_product_flash_attention_backward, flash_bwd, None, 3),
        "efficient_backward": (aten._scaled_dot_product_efficient_attention_backward, eff_bwd, None, 3),
        # FlopCounterMode reads these kernels' dense (batch, length, heads, dim) inputs as (batch, heads,
        # length, dim): the reference is the sdpa operator on the same tensors in its layout.
        "flash_forward": (aten._flash_attention_forward, (qt, kt, vt, None, None, 128, 96, 0.0, False, False),
                          lambda: aten._scaled_dot_product_flash_attention(q, k, v), 2),
        "efficient_forward": (aten._efficient_attention_forward,
                              (qt, kt, vt, None, None, None, None, None, 0.0, 0, True),
                              lambda: aten._scaled_dot_product_efficient_attention(q, k, v, None, True), 2),
        "flash_backward_direct": (
            aten._flash_attention_backward, (got, qt, kt, vt, fa[0], fa[1], None, None, 128, 96, 0.0, False, fa[2],
                                             fa[3]),
            lambda: aten._scaled_dot_product_flash_attention_backward(*flash_bwd), 3),
        "efficient_backward_direct": (
            aten._efficient_attention_backward, (got, qt, kt, vt, None, ea[0], None, None, 128, 96, ea[1], 0.0, ea[2],
                                                 ea[3], 0, False),
            lambda: aten._scaled_dot_product_efficient_attention_backward(*eff_bwd), 3),
        # packed sequences of equal lengths (FlopCounterMode takes each meta sequence at its maximum)
        "flash_forward_packed": (aten._flash_attention_forward, (*packed, cum_q, cum_k, 128, 96, 0.0, False, False),
                                 None, 2),
    }


@pytest.mark.parametrize("case", list(_gpu_attention_cases()))
def test_gpu_attention_on_meta_matches_flop_counter(case: str, tmp_path: Path) -> None:
    op, args, reference, outputs = _gpu_attention_cases()[case]
    events = recorded(lambda: op(*args), tmp_path)
    c = cost(first(events, op.default.name()))
    assert c is not None and c.flops == reference_flops(reference or (lambda: op(*args))) > 0
    result = op(*args)
    assert c.bytes == tensor_bytes(args) + tensor_bytes(list(result)[:outputs])


# --- other GEMMs on meta tensors (CUDA-only kernels) ---------------------------------------------------

def test_scaled_mm_on_meta(tmp_path: Path) -> None:
    a, b = meta(64, 128, dtype=torch.float8_e4m3fn), meta(32, 128, dtype=torch.float8_e4m3fn).t()
    sa, sb = torch.ones((), **META), torch.ones((), **META)
    call = lambda: aten._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)  # noqa: E731
    c = cost(first(recorded(call, tmp_path), "aten::_scaled_mm"))
    assert c is not None and c.flops == reference_flops(call) > 0
    assert c.bytes == tensor_bytes([a, b, sa, sb, call()])
    assert dtype_of(["c10::Float8_e4m3fn"]) == "fp8"


@pytest.mark.parametrize("layout", ["2d_3d", "3d_3d", "2d_2d", "3d_2d"])
def test_grouped_mm_on_meta(layout: str, tmp_path: Path) -> None:
    g, m, k, n = 4, 8, 32, 16
    offs = torch.empty(g, dtype=torch.int32, **META)
    a, b, per_group = {
        "2d_3d": (meta(g * m, k), meta(g, k, n), lambda: [aten.mm(meta(m, k), meta(k, n)) for _ in range(g)]),
        "3d_3d": (meta(g, m, k), meta(g, k, n), lambda: [aten.mm(meta(m, k), meta(k, n)) for _ in range(g)]),
        "2d_2d": (meta(m, g * k), meta(n, g * k).t(), lambda: [aten.mm(meta(m, k), meta(k, n)) for _ in range(g)]),
        "3d_2d": (meta(g, m, k), meta(n * g, k).t(), lambda: [aten.mm(meta(m, k), meta(k, n)) for _ in range(g)]),
    }[layout]
    call = lambda: aten._grouped_mm(a, b, None if layout == "3d_3d" else offs)  # noqa: E731
    c = cost(first(recorded(call, tmp_path), "aten::_grouped_mm"))
    # FlopCounterMode has no _grouped_mm formula: the reference is one mm per group (equal groups)
    assert c is not None and c.flops == reference_flops(per_group) > 0
    assert c.bytes == tensor_bytes([a, b, call()] + ([] if layout == "3d_3d" else [offs]))


# --- bytes: inputs read + outputs written, against the tensors themselves --------------------------------

def _x(*shape: int, dtype: Any = torch.float32) -> Any:
    return torch.randn(*shape, dtype=dtype)


def _bytes_cases() -> dict[str, tuple[Any, tuple, str]]:
    """name -> (operator overload, arguments, what is written besides the outputs / not read:
    "" (nothing), "write_only" (self is not read), "running_stats" (batch norm's, updated in place))."""
    x, y, w = _x(4, 6, 8), _x(6, 8), _x(8)
    bf = _x(4, 6, 8, dtype=torch.bfloat16)
    img, kern = _x(2, 4, 9, 9), _x(6, 2, 3, 3)
    go_conv = aten.convolution(img, kern, None, [2, 2], [1, 1], [1, 1], False, [0, 0], 2)
    timg, tkern = _x(2, 4, 5, 5), _x(4, 3, 3, 3)
    q = k = v = _x(2, 3, 64, 32, dtype=torch.bfloat16)
    out, lse = aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, True)
    ln = aten.native_layer_norm(x, [8], w, w, 1e-5)
    bn_x, bn_w = _x(4, 6, 5), _x(6)
    bn = aten.native_batch_norm(bn_x, bn_w, bn_w, bn_w.clone(), bn_w.abs(), True, 0.1, 1e-5)
    return {
        "mm": (aten.mm.default, (_x(8, 16), _x(16, 12)), ""),
        "addmm": (aten.addmm.default, (_x(12), _x(8, 16), _x(16, 12)), ""),
        "bmm": (aten.bmm.default, (_x(3, 8, 16, dtype=torch.bfloat16), _x(3, 16, 5, dtype=torch.bfloat16)), ""),
        "baddbmm": (aten.baddbmm.default, (_x(1, 8, 5), _x(3, 8, 16), _x(3, 16, 5)), ""),
        "addbmm": (aten.addbmm.default, (_x(8, 5), _x(3, 8, 16), _x(3, 16, 5)), ""),
        "convolution": (aten.convolution.default, (img, kern, _x(6), [2, 2], [1, 1], [1, 1], False, [0, 0], 2), ""),
        "conv_transposed": (aten.convolution.default, (timg, tkern, None, [2, 2], [1, 1], [1, 1], True, [1, 1], 1),
                            ""),
        "convolution_backward": (aten.convolution_backward.default, (
            torch.ones_like(go_conv), img, kern, [6], [2, 2], [1, 1], [1, 1], False, [0, 0], 2,
            [True, True, True]), ""),
        "convolution_backward_input_only": (aten.convolution_backward.default, (
            torch.ones_like(go_conv), img, kern, None, [2, 2], [1, 1], [1, 1], False, [0, 0], 2,
            [True, False, False]), ""),
        "add_broadcast": (aten.add.Tensor, (_x(4, 1, 8), y), ""),
        "mul_scalar": (aten.mul.Scalar, (bf, 2.0), ""),
        "mul_wrapped_scalar": (aten.mul.Tensor, (bf, torch.tensor(2.0, dtype=torch.float64)), ""),
        "relu": (aten.relu.default, (x,), ""),
        "gelu": (aten.gelu.default, (bf,), ""),
        "add_inplace": (aten.add_.Tensor, (x.clone(), w), ""),
        "silu_inplace": (aten.silu_.default, (x.clone(),), ""),
        "where": (aten.where.self, (x > 0, x, w), ""),
        "masked_fill": (aten.masked_fill.Scalar, (x, x > 0, 0.0), ""),
        "threshold_backward": (aten.threshold_backward.default, (x, y, 0.0), ""),
        "copy_": (aten.copy_.default, (bf.clone(), x), "write_only"),
        "fill_": (aten.fill_.Scalar, (x.clone(), 1.0), "write_only"),
        "zero_": (aten.zero_.default, (x.clone(),), "write_only"),
        "native_dropout": (aten.native_dropout.default, (x, 0.5, True), ""),
        "sum_all": (aten.sum.default, (x,), ""),
        "sum_dims": (aten.sum.dim_IntList, (x, [0, 2], True), ""),
        "mean": (aten.mean.dim, (bf, [-1]), ""),
        "amax": (aten.amax.default, (x, [1]), ""),
        "max_dim": (aten.max.dim, (x, 1, True), ""),
        "max_other": (aten.max.other, (x, y), ""),
        "var": (aten.var.correction, (x, [1]), ""),
        "linalg_vector_norm": (aten.linalg_vector_norm.default, (x, 2, [2]), ""),
        "native_layer_norm": (aten.native_layer_norm.default, (x, [6, 8], None, None, 1e-5), ""),
        "native_layer_norm_backward": (aten.native_layer_norm_backward.default, (
            torch.ones_like(x), x, [8], ln[1], ln[2], w, w, [True, True, True]), ""),
        "fused_rms_norm": (aten._fused_rms_norm.default, (bf, [8], bf[0, 0], 1e-6), ""),
        "native_batch_norm_train": (aten.native_batch_norm.default, (
            bn_x, bn_w, bn_w, bn_w.clone(), bn_w.abs(), True, 0.1, 1e-5), "running_stats"),
        "native_batch_norm_eval": (aten.native_batch_norm.default, (
            bn_x, bn_w, bn_w, bn_w.clone(), bn_w.abs(), False, 0.1, 1e-5), ""),
        "native_batch_norm_backward": (aten.native_batch_norm_backward.default, (
            torch.ones_like(bn_x), bn_x, bn_w, None, None, bn[1], bn[2], True, 1e-5, [True, True, False]), ""),
        "softmax": (aten._softmax.default, (x, -1, False), ""),
        "log_softmax": (aten._log_softmax.default, (bf, 1, False), ""),
        "softmax_backward": (aten._softmax_backward_data.default, (x, x, -1, torch.float32), ""),
        "flash_attention_cpu": (aten._scaled_dot_product_flash_attention_for_cpu.default, (q, k, v, 0.0, True), ""),
        "flash_attention_cpu_backward": (aten._scaled_dot_product_flash_attention_for_cpu_backward.default, (
            torch.ones_like(out), q, k, v, out, lse, 0.0, True), ""),
    }


# FlopCounterMode counts these otherwise, as the FLOP tests above show: no addbmm or CPU flash formula,
# and a grouped convolution's weight gradient counted ``groups`` times.
FLOP_COUNTER_DIFFERS = {"addbmm", "convolution_backward", "flash_attention_cpu", "flash_attention_cpu_backward"}


@pytest.mark.parametrize("case", list(_bytes_cases()))
def test_bytes_match_the_tensors(case: str, tmp_path: Path) -> None:
    op, args, extra = _bytes_cases()[case]
    events = recorded(lambda: op(*args), tmp_path)
    c = cost(first(events, op.name().split(".")[0]))
    result = op(*args)
    read = tensor_bytes(args[1:] if extra == "write_only" else args)
    written = tensor_bytes(result if isinstance(result, tuple) else [result])
    if extra == "running_stats":
        written += tensor_bytes(args[3:5])
    assert c is not None and c.bytes == read + written > 0
    if case not in FLOP_COUNTER_DIFFERS:
        assert c.flops == reference_flops(lambda: op(*args))
    assert (c.flops > 0) == (c.op_class in ("gemm", "conv", "attention"))


@pytest.mark.parametrize("case", ["layer_norm", "rms_norm", "batch_norm"])
def test_half_precision_statistics_are_fp32(case: str, tmp_path: Path) -> None:
    """On a GPU (here: meta tensors, whose shapes and types follow CUDA's) bf16 normalisations save
    their statistics in fp32; the bytes count them so."""
    x, w = meta(4, 6, 8), meta(8)
    bw = meta(6)
    op, args = {"layer_norm": (aten.native_layer_norm.default, (x, [8], w, w, 1e-5)),
                "rms_norm": (aten._fused_rms_norm.default, (x, [8], w, 1e-6)),
                "batch_norm": (aten.native_batch_norm.default, (x, bw, bw, None, None, True, 0.1, 1e-5))}[case]
    c = cost(first(recorded(lambda: op(*args), tmp_path), op.name().split(".")[0]))
    result = op(*args)
    assert result[1].dtype == torch.float32
    assert c is not None and c.bytes == tensor_bytes(args) + tensor_bytes(result)


# --- argument positions of kernels that cannot run here ---------------------------------------------------

def test_cudnn_convolution_reads_its_own_argument_order(tmp_path: Path) -> None:
    """cuDNN's convolutions take (padding, stride, dilation) / (padding, output_padding, stride, ...):
    their arguments, written as the profiler records them, cost what ``aten::convolution`` does."""
    x, w, wt = _x(2, 4, 11, 9), _x(6, 2, 3, 3), _x(4, 3, 3, 3)
    forward = lambda: F.conv2d(x, w, stride=2, padding=1, dilation=2, groups=2)  # noqa: E731
    transposed = lambda: F.conv_transpose2d(x, wt, stride=2, padding=1, output_padding=1, groups=2)  # noqa: E731
    scalars = ["ScalarList"] * 3 + ["Scalar"] * 4
    direct = op_cost("aten::cudnn_convolution", [list(x.shape), list(w.shape)] + [[]] * 7, ["float"] * 2 + scalars,
                     ["", "", "[1, 1]", "[2, 2]", "[2, 2]", "2", "False", "False", "True"])
    direct_t = op_cost("aten::cudnn_convolution_transpose", [list(x.shape), list(wt.shape)] + [[]] * 8,
                       ["float"] * 2 + ["ScalarList"] + scalars,
                       ["", "", "[1, 1]", "[1, 1]", "[2, 2]", "[1, 1]", "2", "False", "False", "True"])
    for fn, c in ((forward, direct), (transposed, direct_t)):
        assert c == cost(first(recorded(fn, tmp_path), "aten::convolution"))
        assert c is not None and c.flops == reference_flops(fn) > 0


def test_dtype_names_match_torch(tmp_path: Path) -> None:
    kinds = {torch.float32: "fp32", torch.float64: "fp64", torch.float16: "fp16", torch.bfloat16: "bf16",
             torch.float8_e4m3fn: "fp8", torch.float8_e5m2: "fp8", torch.int8: "int8", torch.uint8: "int8",
             torch.int16: "other", torch.int32: "other", torch.int64: "other", torch.bool: "other",
             torch.complex64: "other", torch.complex128: "other"}
    tensors = [torch.empty(3, dtype=d, **META) for d in kinds]
    events = [e for e in recorded(lambda: [aten.alias(t) for t in tensors], tmp_path) if e["name"] == "aten::alias"]
    assert len(events) == len(tensors)
    for t, e in zip(tensors, events):
        name = e["args"]["Input type"][0]
        assert DTYPE_BYTES[name] == t.element_size(), name
        assert dtype_of(["Scalar", name]) == kinds[t.dtype], name


# --- the repository's real traces ----------------------------------------------------------------------

def _trace_ops(path: Path) -> list[dict]:
    data = json.loads(gzip.decompress(path.read_bytes()))
    events = data.get("traceEvents", []) if isinstance(data, dict) else data
    ops = [e for e in events if isinstance(e, dict) and isinstance(e.get("args"), dict)
           and ("Input Dims" in e["args"] or "Input dims" in e["args"])]
    for e in ops:
        e["args"].setdefault("Input Dims", e["args"].get("Input dims"))
    return sorted(ops, key=lambda e: (str(e.get("tid")), e.get("ts", 0), -e.get("dur", 0)))


@pytest.mark.parametrize("path", sorted(TRACES.rglob("*.json.gz")), ids=lambda p: p.name[:40])
def test_repository_traces(path: Path) -> None:
    """Every recorded operator is read without error; matrix products and attention match
    FlopCounterMode run on meta tensors of the recorded shapes; costed nests agree."""
    ops = _trace_ops(path)
    checked: set[tuple[str, str]] = set()
    for e in ops:
        c = cost(e)
        assert c is None or (c.flops >= 0 and c.bytes >= 0)
        name, dims = e["name"], e["args"]["Input Dims"]
        if name in ("aten::mm", "aten::addmm", "aten::bmm", "aten::_scaled_dot_product_flash_attention") and \
                (name, str(dims)) not in checked and len(checked) < 40:
            checked.add((name, str(dims)))
            tensors = [meta(*d, dtype=torch.float32) if d and i < 3 + (name == "aten::addmm") else None
                       for i, d in enumerate(dims)]
            op = getattr(aten, name[6:])
            reference = reference_flops(lambda: op(*[t for t in tensors if t is not None]))
            assert c is not None and c.flops == reference > 0, (name, dims)
        if name == "aten::cudnn_convolution" and not e["args"].get("Concrete Inputs"):
            assert c is None  # 2021 traces: no stride or padding recorded, no output shape
    # The H100 traces nest _flash_attention_forward (batch, length, heads, dim) in the sdpa kernel
    kernels = [e for e in ops if e["name"] == "aten::_flash_attention_forward"]
    pairs = [(a, b) for a in ops if a["name"] == "aten::_scaled_dot_product_flash_attention" for b in kernels
             if b.get("tid") == a.get("tid") and a["ts"] <= b["ts"] <= a["ts"] + a["dur"]]
    for outer, kernel in pairs:
        assert cost(outer) is not None and cost(kernel) is not None
        assert cost(outer).flops == cost(kernel).flops  # type: ignore[union-attr]
    if path.parent.name == "h100":
        assert len(pairs) == len(kernels) > 0


def test_costed_operators_have_formulas() -> None:
    """The reader keeps shapes for ``COSTED_OPERATORS`` only: each needs a formula here; composites
    have none."""
    costed = pytest.importorskip("cuda_tracer.model.costed_operators")
    real = {name for name in costed.COSTED_OPERATORS if hasattr(torch.ops.aten, name[6:])}  # a few are not ops
    assert len(real) > 100 and real <= COUNTED
    assert not COMPOSITES & COUNTED
    assert all(op_cost(name, [[2, 3], [3, 4]], ["float", "float"]) is None for name in COMPOSITES)


# --- peaks --------------------------------------------------------------------------------------------

# Device names as Kineto's deviceProperties, torch.cuda.get_device_name and NVML give them.
DEVICE_ROWS = {
    "NVIDIA H100 80GB HBM3": "NVIDIA H100 SXM",
    "NVIDIA H100 PCIe": "NVIDIA H100 PCIe",
    "NVIDIA H100 NVL": "NVIDIA H100 NVL",
    "NVIDIA H200": "NVIDIA H200 SXM",
    "NVIDIA H200 NVL": "NVIDIA H200 NVL",
    "NVIDIA B200": "NVIDIA B200",
    "NVIDIA GB200": "NVIDIA GB200",
    "NVIDIA A100-SXM4-80GB": "NVIDIA A100 SXM 80GB",
    "NVIDIA A100-SXM4-40GB": "NVIDIA A100 SXM 40GB",
    "NVIDIA A100-PG509-200": "NVIDIA A100 SXM 40GB",
    "NVIDIA A100 80GB PCIe": "NVIDIA A100 PCIe 80GB",
    "NVIDIA A100-PCIE-40GB": "NVIDIA A100 PCIe 40GB",
    "Tesla V100-SXM2-16GB": "NVIDIA V100 SXM2",
    "Tesla V100-SXM2-32GB": "NVIDIA V100 SXM2",
    "Tesla V100-DGXS-32GB": "NVIDIA V100 SXM2",
    "Tesla V100-PCIE-32GB": "NVIDIA V100 PCIe",
    "AMD Instinct MI250X / MI250": "AMD Instinct MI250X (one GCD)",
    "AMD Instinct MI250X": "AMD Instinct MI250X (one GCD)",
    "AMD Instinct MI300X": "AMD Instinct MI300X",
    "AMD Instinct MI300X VF": "AMD Instinct MI300X",
    "AMD Instinct MI325X": "AMD Instinct MI325X",
    "AMD Instinct MI355X": "AMD Instinct MI355X",
}
# Other parts, and names too vague to tell (an MI250's gfx90a name in the repository's ROCm trace).
UNKNOWN_DEVICES = ["NVIDIA GH200 480GB", "NVIDIA H20", "NVIDIA H800", "NVIDIA B300 SXM6 AC", "Tesla V100S-PCIE-32GB",
                   "NVIDIA A10", "NVIDIA L40S", "NVIDIA GeForce RTX 4090", "AMD Instinct MI300A",
                   "AMD Instinct MI308X", "AMD Instinct MI350X", "AMD Radeon Graphics", ""]


def _repository_device_names() -> set[str]:
    names = {json.loads((REPO / "tests/data/gpu_capture/results.json").read_text())["nvml"]["name"]}
    for path in [*TRACES.rglob("*.json.gz"), REPO / "tests/data/gpu_capture/kineto_trace.json.gz"]:
        data = json.loads(gzip.decompress(path.read_bytes()))
        if isinstance(data, dict):
            names |= {p["name"] for p in data.get("deviceProperties") or [] if p.get("name")}
    return names


def test_device_names_match_their_rows() -> None:
    for name, row in DEVICE_ROWS.items():
        peak = peak_for(name, "fp32")
        assert peak is not None and peak.device == row, name
    assert set(DEVICE_ROWS.values()) == set(known_devices())
    for name in UNKNOWN_DEVICES:
        assert peak_for(name, "bf16") is None, name


def test_repository_device_names_are_known() -> None:
    names = _repository_device_names()
    assert {"NVIDIA H200", "NVIDIA B200", "NVIDIA H100 80GB HBM3"} <= names
    for name in names:
        assert name in DEVICE_ROWS or name in UNKNOWN_DEVICES, f"add {name!r} to this test's tables"


def test_peak_figures_are_consistent() -> None:
    for device in known_devices():
        peaks = {d: peak_for(device.replace(" (one GCD)", ""), d) for d in ("fp64", "fp32", "tf32", "bf16", "fp16",
                                                                             "fp8")}
        assert all(p is not None and p.device == device for p in peaks.values()), device
        fig = {d: p.tflops for d, p in peaks.items() if p is not None and p.dtype == d}
        assert fig["fp16"] == fig.get("bf16", fig["fp16"]) and fig["fp32"] >= fig["fp64"] * 0.5
        assert fig.get("tf32", 0) < fig["fp16"] and fig["fp16"] > fig["fp32"]
        if "fp8" in fig:  # 8-bit tensor/matrix math runs at twice the 16-bit rate on every part here
            assert fig["fp8"] == pytest.approx(2 * fig["fp16"], rel=1e-3)
        assert 0.5 <= peaks["fp32"].tb_per_s <= 10  # type: ignore[union-attr]


def test_peak_fallbacks_and_overrides() -> None:
    v100, v100_fp32 = peak_for("Tesla V100-SXM2-32GB", "tf32"), peak_for("Tesla V100-SXM2-32GB", "fp32")
    assert v100 is not None and v100_fp32 is not None and (v100.dtype, v100.tflops) == ("fp32", v100_fp32.tflops)
    a100 = peak_for("NVIDIA A100-SXM4-80GB", "fp8")
    assert a100 is not None and a100.dtype == "fp16"
    assert peak_for("NVIDIA H100 80GB HBM3", "int8") is None
    assert peak_for("NVIDIA H100 80GB HBM3", "other") is None
    table = peak_for("NVIDIA H100 PCIe", "bf16")
    over = peak_for("NVIDIA H100 PCIe", "bf16", 500.0)
    assert table is not None and over is not None
    assert (over.device, over.tflops, over.tb_per_s) == (table.device, 500.0, table.tb_per_s)
    both = peak_for("NVIDIA H100 PCIe", "bf16", 500.0, 1.5)
    assert both is not None and (both.tflops, both.tb_per_s) == (500.0, 1.5)
    custom = peak_for("Some Accelerator 9000", "bf16", 123.0, 4.5)
    assert custom is not None and (custom.device, custom.dtype, custom.tflops, custom.tb_per_s) == (
        "Some Accelerator 9000", "bf16", 123.0, 4.5)
    assert peak_for("Some Accelerator 9000", "bf16") is None
    assert peak_for("Some Accelerator 9000", "bf16", None, 4.5) is None  # no FLOP/s figure


def test_peak_override_reads_the_settings_only_when_set(monkeypatch) -> None:
    from otel_profiler.analysis.flops.result import PeakOverride, peak_override

    monkeypatch.delenv("OTEL_PROFILER_PEAK_TFLOPS", raising=False)
    monkeypatch.delenv("OTEL_PROFILER_PEAK_TB_PER_S", raising=False)
    assert peak_override() == PeakOverride()
    monkeypatch.setenv("OTEL_PROFILER_PEAK_TB_PER_S", "2.5")
    assert peak_override() == PeakOverride(None, 2.5)
    monkeypatch.setenv("OTEL_PROFILER_PEAK_TFLOPS", "not a number")  # the settings' rule: the default
    assert peak_override() == PeakOverride(None, 2.5)
    monkeypatch.setenv("OTEL_PROFILER_PEAK_TFLOPS", "312")
    assert peak_override() == PeakOverride(312.0, 2.5)
