"""FLOPs and bytes of one PyTorch operator call, from what a trace recorded with ``record_shapes`` holds.

What the profiler records (torch 2.13, a ``cpu_op`` event's ``args``), an entry per schema argument
in schema order, keyword-only ones included: ``Input Dims`` (a list of ints for a tensor;
``[]`` for a 0-dim tensor, a scalar or None; a list of lists for a tensor list), ``Input type`` (a
tensor's element type as C++ names it, ``float``, ``c10::BFloat16``, ``long int``...; else ``Scalar``,
``ScalarList``, ``TensorList`` or ``""``), ``Input Strides`` and ``Concrete Inputs`` (non-tensor values
as text, ``"False"``, ``"2"``, ``"0.5"``, ``"[1, 1]"``; ``""`` for tensors and None). Outputs are not
recorded: their shapes are inferred here.

Conventions (those of ``torch.utils.flop_counter.FlopCounterMode`` for FLOPs):

- A multiply-add is 2 FLOPs. Matmuls and convolutions count their products (bias, ``alpha``/``beta``
  terms left out); attention its matmuls, 2 forward (scores, scores x V), 5 backward (scores again, dP,
  dV, dQ, dK). Causal masking is not discounted (FlopCounterMode counts the full square too).
- Memory-bound operators (elementwise, reductions, normalisation, softmax) count 0 FLOPs, as
  FlopCounterMode and MFU do: their cost is their bytes.
- Bytes: each tensor input read once and each output written once at its type's size (an in-place
  ``self`` both; ``copy_``, ``fill_``, ``zero_`` write ``self`` unread): an ideal kernel's traffic,
  strides, caches and workspaces ignored. Half/bf16 normalisation statistics count 4 bytes (CUDA's).

Counting once: operators nest (``aten::linear`` > ``aten::addmm`` > ``aten::copy_`` of the bias;
``aten::convolution`` > ``aten::_convolution`` > ``aten::cudnn_convolution``, each giving the same
figure; ``aten::mean`` > ``aten::sum``). Count an operator when ``counted(name)`` and no operator above
it is counted. Composites whose children do the work (``COMPOSITES``: ``aten::linear``,
``aten::matmul``, ``aten::conv2d``, ``aten::scaled_dot_product_attention``...) have no formula.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["COMPOSITES", "COUNTED", "DTYPE_BYTES", "OpCost", "counted", "dtype_of", "op_cost"]


@dataclass(frozen=True)
class OpCost:
    """The cost of one operator call."""

    flops: float          # floating-point operations (a multiply-add = 2)
    bytes: float          # bytes read + written (inputs + outputs, element sizes from the types)
    op_class: str         # "gemm" | "conv" | "attention" | "elementwise" | "other"


# Element type names as the profiler writes them (the C++ type name; older traces: "long", "int").
DTYPE_BYTES: dict[str, int] = {
    "float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1, "c10::Float8_e4m3fnuz": 1, "c10::Float8_e5m2fnuz": 1, "c10::Float8_e8m0fnu": 1,
    "c10::Float4_e2m1fn_x2": 1, "signed char": 1, "unsigned char": 1, "bool": 1, "short int": 2, "short": 2,
    "short unsigned int": 2, "int": 4, "unsigned int": 4, "long int": 8, "long": 8, "long long": 8,
    "long long int": 8, "long unsigned int": 8, "int64_t": 8, "__int64": 8, "c10::complex<c10::Half>": 4,
    "c10::complex<float>": 8, "c10::complex<double>": 16, "c10::qint8": 1, "c10::quint8": 1,
    "c10::qint32": 4, "c10::quint4x2": 1, "c10::quint2x4": 1}
_DTYPE_CLASS = {"float": "fp32", "double": "fp64", "c10::Half": "fp16", "c10::BFloat16": "bf16",
                "signed char": "int8", "unsigned char": "int8", "c10::qint8": "int8", "c10::quint8": "int8",
                **{t: "fp8" for t in DTYPE_BYTES if t.startswith("c10::Float8_e")}}
# ScalarType codes (c10's enum, as ``Concrete Inputs`` writes ``dtype`` / ``out_dtype`` arguments).
_SCALAR_TYPES = {0: "unsigned char", 1: "signed char", 2: "short int", 3: "int", 4: "long int", 5: "c10::Half",
                 6: "float", 7: "double", 11: "bool", 15: "c10::BFloat16", 23: "c10::Float8_e5m2",
                 24: "c10::Float8_e4m3fn", 25: "c10::Float8_e5m2fnuz", 26: "c10::Float8_e4m3fnuz"}

# Composites whose children do (and count) the work: no formula on purpose.
COMPOSITES: frozenset[str] = frozenset(f"aten::{n}" for n in (
    "linear", "matmul", "einsum", "bilinear", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
    "conv_transpose2d", "conv_transpose3d", "_convolution_mode", "scaled_dot_product_attention",
    "_scaled_dot_product_attention_math", "layer_norm", "rms_norm", "batch_norm", "_batch_norm_impl_index",
    "group_norm", "instance_norm", "softmax", "log_softmax", "_safe_softmax", "cross_entropy_loss",
    "to", "_to_copy", "clone", "contiguous"))


def dtype_of(types: list[str]) -> str:
    """The compute dtype of an operator, that of its first tensor input: "fp32", "bf16", "fp16",
    "fp8", "fp64", "int8" or "other" (TF32 cannot be told from a trace: it records "float")."""
    return next((_DTYPE_CLASS.get(t, "other") for t in types if isinstance(t, str) and t in DTYPE_BYTES), "other")


class _Args:
    """An operator's recorded arguments, read by position."""

    def __init__(self, dims: list, types: list[str], concrete: list[str] | None) -> None:
        self.dims, self.types, self.concrete = dims, types, concrete or []

    def shape(self, i: int) -> list[int] | None:  # input i's shape when it is a tensor
        if i >= len(self.dims) or i >= len(self.types) or self.types[i] not in DTYPE_BYTES:
            return None
        d = self.dims[i]
        return d if isinstance(d, list) and all(type(x) is int for x in d) else None

    def size(self, i: int) -> int:  # element size of input i
        return DTYPE_BYTES.get(self.types[i], 4) if i < len(self.types) else 4

    def nbytes(self, i: int) -> float:  # bytes of input i (0: not a tensor)
        s = self.shape(i)
        return 0.0 if s is None else float(math.prod(s) * self.size(i))

    def read(self, skip: int = -1) -> float:
        """Bytes of all tensor inputs (tensor lists at the compute dtype's size), input ``skip`` left out."""
        total = sum(self.nbytes(i) for i in range(len(self.dims)) if i != skip)
        item = next((self.size(i) for i in range(len(self.types)) if self.types[i] in DTYPE_BYTES), 4)
        for i, d in enumerate(self.dims):
            if i < len(self.types) and self.types[i] == "TensorList" and isinstance(d, list):
                total += sum(math.prod(t) * item for t in d if isinstance(t, list))
        return float(total)

    def text(self, i: int | None) -> str:
        v = self.concrete[i] if i is not None and i < len(self.concrete) else ""
        return v.strip() if isinstance(v, str) else ""

    def ints(self, i: int | None) -> list[int] | None:
        """An int or int-list argument (``"2"``, ``"[1, 1]"``); None when absent or not recorded."""
        parts = [p.strip() for p in self.text(i).strip("[]").split(",") if p.strip()]
        readable = self.text(i) != "" and all(p.lstrip("-").isdigit() for p in parts)
        return [int(p) for p in parts] if readable else None

    def flag(self, i: int | None, default: bool) -> bool:
        return {"True": True, "False": False, "1": True, "0": False}.get(self.text(i), default)

    def flags(self, i: int | None, default: list[bool]) -> list[bool]:
        parts = [p.strip() for p in self.text(i).strip("[]").split(",") if p.strip()]
        return [p == "True" for p in parts] if parts else default

    def out_size(self, i: int | None, default: int) -> int:
        """The element size of a ``dtype``/``out_dtype`` argument, else ``default``."""
        code = self.ints(i)
        return DTYPE_BYTES[_SCALAR_TYPES[code[0]]] if code and code[0] in _SCALAR_TYPES else default


def _broadcast(shapes: list[list[int]]) -> list[int]:
    n = max(len(s) for s in shapes)
    padded = [[1] * (n - len(s)) + s for s in shapes]
    return [max(col) if min(col) != 0 else 0 for col in zip(*padded)]


# --- matrix products ---------------------------------------------------------------------------------

def _matmul(a: _Args, i: int, reduce_batch: bool = False, out_dtype: int | None = None) -> OpCost | None:
    """``x @ w`` of inputs ``i``, ``i+1`` (2-D, or 3-D batched); ``reduce_batch``: addbmm's sum."""
    x, w = a.shape(i), a.shape(i + 1)
    if x is None or w is None or len(x) != len(w) or len(x) not in (2, 3) or x[-1] != w[-2]:
        return None
    batch = x[0] if len(x) == 3 else 1
    m, k, n = x[-2], x[-1], w[-1]
    out = m * n * (1 if reduce_batch else batch)
    return OpCost(2.0 * batch * m * n * k, a.read() + out * a.out_size(out_dtype, a.size(i)), "gemm")


def _grouped_mm(a: _Args, offs: int, out_dtype: int) -> OpCost | None:
    """``_grouped_mm``: 2-D x 3-D (rows split by ``offs``), 3-D x 3-D, 2-D x 2-D (K split: an output per
    group), 3-D x 2-D (columns split); each output element costs 2 x its group's K."""
    x, w = a.shape(0), a.shape(1)
    if x is None or w is None or (len(x), len(w)) not in ((2, 3), (3, 3), (2, 2), (3, 2)):
        return None
    groups = math.prod(a.shape(offs) or [1]) if (len(x), len(w)) == (2, 2) else 1
    rows = math.prod(x[:-1]) if len(w) == 3 else x[-2]
    return OpCost(2.0 * rows * w[-1] * x[-1], a.read() + groups * rows * w[-1] * a.out_size(out_dtype, a.size(0)),
                  "gemm")


# --- convolutions ------------------------------------------------------------------------------------

# Argument positions: stride, padding, dilation, transposed (an index or a fixed bool), output_padding,
# groups (None: the argument does not exist, its default applies).
_CONV: dict[str, tuple[int, int, int | None, int | bool, int | None, int | None]] = {
    **dict.fromkeys(("convolution", "_convolution", "convolution_overrideable"), (3, 4, 5, 6, 7, 8)),
    "cudnn_convolution": (3, 2, 4, False, None, 5),
    "cudnn_convolution_transpose": (4, 2, 5, True, 3, 6),
    **dict.fromkeys(("mkldnn_convolution", "miopen_convolution", "miopen_depthwise_convolution"),
                    (4, 3, 5, False, None, 6)),
    "miopen_convolution_transpose": (5, 3, 6, True, 4, 7),
    **dict.fromkeys(("_slow_conv2d_forward", "slow_conv3d_forward"), (4, 5, None, False, None, None)),
    **dict.fromkeys(("slow_conv_dilated2d", "slow_conv_dilated3d"), (4, 5, 6, False, None, None)),
    **dict.fromkeys(("slow_conv_transpose2d", "slow_conv_transpose3d"), (4, 5, 7, True, 6, None)),
}


def _conv_flops(x: list[int], w: list[int], go_or_out: list[int], transposed: bool) -> float:
    """2 x batch x (output positions, or input positions when transposed) x weight elements."""
    n = len(w) - 2
    batch = math.prod(x[:len(x) - n - 1])
    return 2.0 * batch * math.prod((x if transposed else go_or_out)[-n:]) * math.prod(w)


def _convolution(a: _Args, spec: tuple[int, int, int | None, int | bool, int | None, int | None]) -> OpCost | None:
    s_i, p_i, d_i, t_i, op_i, g_i = spec
    x, w = a.shape(0), a.shape(1)
    if x is None or w is None or len(w) < 3 or len(x) < len(w) - 1:
        return None
    n = len(w) - 2
    transposed = t_i if isinstance(t_i, bool) else a.flag(t_i, False)
    stride, pad = a.ints(s_i), a.ints(p_i)
    dil = a.ints(d_i) if d_i is not None else [1]
    outpad = (a.ints(op_i) or [0]) if op_i is not None else [0]
    groups = (a.ints(g_i) or [1])[0] if g_i is not None else 1
    if stride is None or pad is None or dil is None:
        return None  # no concrete inputs (older traces): the output shape is unknown
    s, p, d, o = ([v[0]] * n if len(v) == 1 else v for v in (stride, pad, dil, outpad))
    sp, k = x[-n:], w[2:]
    if transposed:
        out_sp = [(sp[j] - 1) * s[j] - 2 * p[j] + d[j] * (k[j] - 1) + o[j] + 1 for j in range(n)]
        c_out = w[1] * groups
    else:
        out_sp = [(sp[j] + 2 * p[j] - d[j] * (k[j] - 1) - 1) // s[j] + 1 for j in range(n)]
        c_out = w[0]
    out = x[:len(x) - n - 1] + [c_out] + out_sp
    return OpCost(_conv_flops(x, w, out, transposed), a.read() + math.prod(out) * a.size(0), "conv")


def _conv_backward(a: _Args, go_i: int, x_i: int, t_i: int | None, mask_i: int) -> OpCost | None:
    """Gradient of the input and of the weight (each as many FLOPs as the forward), as the mask says."""
    go, x, w = a.shape(go_i), a.shape(x_i), a.shape(2)
    if go is None or x is None or w is None or len(w) < 3:
        return None
    transposed = a.flag(t_i, False)
    mask = (a.flags(mask_i, [True, True, False]) + [False] * 3)[:3]
    bias = (a.ints(3) or [0]) if mask[2] and t_i is not None else [0]
    fwd = _conv_flops(x, w, go, transposed)
    written = mask[0] * a.nbytes(x_i) + mask[1] * a.nbytes(2) + math.prod(bias) * a.size(go_i) * mask[2]
    return OpCost(fwd * (mask[0] + mask[1]), a.read() + written, "conv")


# --- attention ---------------------------------------------------------------------------------------

# name -> (position of q, layout ("bhld": batch, heads, length, dim; "blhd"), backward,
#          positions of cum_seq_q, max_q, max_k (variable-length batches) or None,
#          logsumexp: "" (always written), an index of its compute flag, or None (not an output))
_SDPA = ("_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_for_cpu",
         "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_fused_attention_overrideable")
_ATTENTION: dict[str, tuple[int, str, bool, tuple[int, int, int] | None, str | int | None]] = {
    **{n: (0, "bhld", False, None, "") for n in _SDPA},
    **{f"{n}_backward": (1, "bhld", True, None, None) for n in (*_SDPA, "_scaled_dot_product_efficient_attention")},
    "_scaled_dot_product_efficient_attention": (0, "bhld", False, None, 4),
    "_flash_attention_forward": (0, "blhd", False, (3, 5, 6), ""),
    "_efficient_attention_forward": (0, "blhd", False, (4, 6, 7), 10),
    "_flash_attention_backward": (1, "blhd", True, (6, 8, 9), None),
    "_efficient_attention_backward": (1, "blhd", True, (6, 8, 9), None),
}


def _attention(a: _Args, name: str) -> OpCost | None:
    qi, layout, backward, varlen, lse = _ATTENTION[name]
    q, k, v = a.shape(qi), a.shape(qi + 1), a.shape(qi + 2)
    if q is None or k is None or v is None or len(q) != len(k) or len(q) not in (3, 4):
        return None
    e, ev = q[-1], v[-1]
    cum = a.shape(varlen[0]) if varlen else None
    if varlen and cum is not None:
        # Packed sequences: the total lengths are known, each one's not; sum(Lq_i * Lk_i) is at most
        # min(Tq * max_k, Tk * max_q), exact when the sequences have equal lengths.
        heads, tq, tk = q[-2], q[-3], k[-3]
        nseq = max(math.prod(cum) - 1, 1)
        mq, mk = (a.ints(varlen[1]) or [tq // nseq])[0], (a.ints(varlen[2]) or [tk // nseq])[0]
        pairs, groups, lq = heads * min(tq * mk, tk * mq), heads, tq
    elif len(q) == 4:
        b, heads, lq, lk = (q[0], q[1], q[2], k[2]) if layout == "bhld" else (q[0], q[2], q[1], k[1])
        pairs, groups = b * heads * lq * lk, b * heads
    else:
        return None
    if backward:  # dq, dk, dv (+ the bias gradient, when asked for)
        bias = {"_scaled_dot_product_efficient_attention_backward": a.flags(10, [False] * 4)[3:] == [True],
                "_scaled_dot_product_fused_attention_overrideable_backward": a.flags(5, [False] * 4)[3:] == [True],
                "_efficient_attention_backward": a.flag(15, False)}.get(name, False)
        written = a.nbytes(qi) + a.nbytes(qi + 1) + a.nbytes(qi + 2) + bias * a.nbytes(4)
        return OpCost(2.0 * pairs * (3 * e + 2 * ev), a.read() + written, "attention")
    out = math.prod(q) // e * ev * a.size(qi)
    lse_rows = groups * lq  # logsumexp: fp32, one per query row and head
    if isinstance(lse, int):  # the memory-efficient kernels pad each head's rows to a multiple of 32
        lse_rows = groups * -(-lq // 32) * 32 if a.flag(lse, False) else 0
    return OpCost(2.0 * pairs * (e + ev), a.read() + out + lse_rows * 4 * (lse is not None), "attention")


# --- memory-bound operators --------------------------------------------------------------------------

_ELEMENTWISE = ("add", "sub", "mul", "div", "relu", "gelu", "silu", "sigmoid", "tanh", "exp", "log", "sqrt",
                "rsqrt", "pow", "neg", "abs", "clamp", "clamp_min", "clamp_max", "where", "threshold",
                "hardtanh", "leaky_relu", "gelu_backward", "silu_backward", "sigmoid_backward",
                "tanh_backward", "threshold_backward", "masked_fill", "addcmul", "addcdiv", "lerp",
                "nan_to_num", "reciprocal", "erf", "sin", "cos", "maximum", "minimum", "mish", "hardswish",
                "elu", "softplus", "native_dropout_backward", "copy", "fill", "zero")
_WRITE_ONLY = {f"aten::{n}{s}" for n in ("copy", "fill", "zero") for s in ("", "_")}


def _elementwise(a: _Args, name: str) -> OpCost | None:
    tensors = [i for i in range(len(a.dims)) if a.shape(i) is not None]
    if not tensors:
        return None
    inplace = name.endswith("_") and tensors[0] == 0
    out_shape = a.shape(0) if inplace else _broadcast([a.shape(i) or [] for i in tensors])
    out_i = 0 if inplace else next((i for i in tensors if a.types[i] != "bool"), tensors[0])
    read = a.read(skip=0 if name in _WRITE_ONLY else -1)
    return OpCost(0.0, read + math.prod(out_shape or []) * a.size(out_i), "elementwise")


def _dropout(a: _Args, name: str) -> OpCost | None:
    """Output and a one-byte keep mask; ``aten::dropout`` in eval mode returns its input: no work."""
    if name.startswith("aten::dropout") and not a.flag(2, True):
        return OpCost(0.0, 0.0, "elementwise")
    return OpCost(0.0, a.read() + a.nbytes(0) + math.prod(a.shape(0) or [0]), "elementwise")


# name -> (position of dim, fewest inputs of the overloads that take a dim: sum(self, dtype) has none)
_REDUCE = {"sum": (1, 3), "mean": (1, 3), "prod": (1, 3), "amax": (1, 2), "amin": (1, 2), "max": (1, 3),
           "min": (1, 3), "var": (1, 4), "std": (1, 4), "norm": (2, 4), "linalg_vector_norm": (2, 4)}


def _reduction(a: _Args, name: str) -> OpCost | None:
    """The output is the input less the reduced dims (all of them when the trace has no dims)."""
    x = a.shape(0)
    if x is None:
        return None
    short = name[6:]
    if short in ("max", "min") and a.shape(1) is not None:
        return _elementwise(a, name)  # max(self, other)
    dim_i, fewest = _REDUCE[short]
    dims = a.ints(dim_i) if len(a.dims) >= fewest else None
    out = math.prod(s for j, s in enumerate(x) if dims and j not in {d % max(len(x), 1) for d in dims})
    indices = 8 * out if short in ("max", "min") and dims else 0  # max.dim / min.dim: int64 indices
    return OpCost(0.0, a.read() + out * a.size(0) + indices, "other")


def _norm(a: _Args, name: str) -> OpCost | None:
    """Normalisations: the output (or the gradients the mask asks for) and the saved statistics."""
    short = name[6:]
    back = short.endswith("backward")
    xi = 1 if back and not short.startswith(("cudnn", "miopen")) else 0
    x = a.shape(xi)
    if x is None:
        return None
    stat = max(4, a.size(xi))  # statistics: at least fp32, the accumulation type
    if short in ("native_layer_norm", "_fused_rms_norm"):
        axes = len(a.ints(1) or a.shape(2) or [x[-1]])
        rows = math.prod(x[:len(x) - axes])
        return OpCost(0.0, a.read() + a.nbytes(0) + rows * stat * (2 if "layer" in short else 1), "other")
    if short in ("native_batch_norm", "_native_batch_norm_legit", "cudnn_batch_norm", "miopen_batch_norm",
                 "_native_batch_norm_legit_no_training"):
        stats = a.shape(3) is not None
        train = a.flag(5 if stats or len(a.dims) > 6 else 3, True) and "no_training" not in short
        channels = x[1] if len(x) > 1 else 1
        running = (a.nbytes(3) + a.nbytes(4)) * (train and stats)  # updated in place
        return OpCost(0.0, a.read() + a.nbytes(0) + 2 * channels * stat * train + running, "other")
    if short == "native_group_norm":
        n, groups = (a.ints(3) or [x[0]])[0], (a.ints(6) or [0])[0]
        return OpCost(0.0, a.read() + a.nbytes(0) + 2 * n * groups * stat, "other")
    # backward: grad_input, grad_weight, grad_bias as the output mask says
    mask_i, w_i = {"native_layer_norm_backward": (7, 5), "_fused_rms_norm_backward": (5, 4),
                   "native_batch_norm_backward": (9, 2), "native_group_norm_backward": (9, 4),
                   "cudnn_batch_norm_backward": (None, 2), "miopen_batch_norm_backward": (None, 2)}[short]
    mask = a.flags(mask_i, [True] * (2 if short == "_fused_rms_norm_backward" else 3))
    weight = a.nbytes(w_i) or (x[1] if len(x) > 1 else 1) * a.size(xi)
    grads = sum(size for size, wanted in zip([a.nbytes(xi), weight, weight], mask) if wanted)
    return OpCost(0.0, a.read() + grads, "other")


def _softmax(a: _Args, name: str) -> OpCost | None:
    x = a.shape(0)
    if x is None:
        return None
    if name.endswith("backward_data"):  # (grad_output, output, dim, input_dtype)
        return OpCost(0.0, a.read() + math.prod(x) * a.out_size(3, a.size(0)), "other")
    return OpCost(0.0, a.read() + math.prod(x) * (4 if a.flag(2, False) else a.size(0)), "other")


_FORMULAS: dict[str, Callable[[_Args, str], OpCost | None]] = {
    **{f"aten::{n}": (lambda a, _: _matmul(a, 0)) for n in ("mm", "bmm")},
    **{f"aten::{n}": (lambda a, _: _matmul(a, 1)) for n in ("addmm", "addmm_", "baddbmm", "baddbmm_")},
    **{f"aten::{n}": (lambda a, _: _matmul(a, 1, True)) for n in ("addbmm", "addbmm_")},
    "aten::_scaled_mm": lambda a, _: _matmul(a, 0, out_dtype=6),
    "aten::_grouped_mm": lambda a, _: _grouped_mm(a, 2, 4),
    "aten::_scaled_grouped_mm": lambda a, _: _grouped_mm(a, 4, 7),
    **{f"aten::{n}": (lambda a, name: _convolution(a, _CONV[name[6:]])) for n in _CONV},
    "aten::convolution_backward": lambda a, _: _conv_backward(a, 0, 1, 7, 10),
    "aten::cudnn_convolution_backward": lambda a, _: _conv_backward(a, 1, 0, None, 10),  # torch < 1.11
    **{f"aten::{n}": (lambda a, name: _attention(a, name[6:])) for n in _ATTENTION},
    **{f"aten::{n}{s}": _elementwise for n in _ELEMENTWISE for s in ("", "_")},
    **{f"aten::{n}": _dropout for n in ("dropout", "dropout_", "native_dropout")},
    **{f"aten::{n}": _reduction for n in _REDUCE},
    **{f"aten::{n}{s}": _norm for s in ("", "_backward") for n in (
        "native_layer_norm", "_fused_rms_norm", "native_batch_norm", "cudnn_batch_norm", "miopen_batch_norm",
        "native_group_norm")},
    **{f"aten::{n}": _norm for n in ("_native_batch_norm_legit", "_native_batch_norm_legit_no_training")},
    **{f"aten::{n}": _softmax for n in ("_softmax", "_log_softmax", "_softmax_backward_data",
                                        "_log_softmax_backward_data")},
}


COUNTED: frozenset[str] = frozenset(_FORMULAS)  # every operator name with a formula


def counted(name: str) -> bool:
    """Whether ``op_cost`` has a formula for ``name`` (the module docstring says which of a nest to count)."""
    return name in _FORMULAS


def op_cost(name: str, dims: list, types: list[str], concrete: list[str] | None = None) -> OpCost | None:
    """The FLOPs, bytes and class of one call of operator ``name`` from its recorded ``Input Dims``,
    ``Input type`` and ``Concrete Inputs``; None for an operator with no formula (not counted) or
    arguments a formula cannot read."""
    formula = _FORMULAS.get(name)
    if formula is None or not isinstance(dims, list) or not isinstance(types, list):
        return None
    try:
        return formula(_Args(dims, types, concrete if isinstance(concrete, list) else None), name)
    except (TypeError, ValueError, IndexError, KeyError, ZeroDivisionError):
        return None
