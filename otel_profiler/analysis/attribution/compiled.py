"""Where compiled code goes, for ``torch.compile`` jobs: the ``compiled`` section of a summary.

What a PyTorch trace records of compiled code (torch 2.x; checked on torch 2.13 CPU traces and on
the Kineto traces under ``tests/data``):

- Each call of a compiled frame: a ``TorchDynamo Cache Lookup`` range (the guards), then a range
  ``Torch-Compiled Region: F/C`` (``F`` the frame id, ``C`` the frame's compile number: ``0/1`` is the
  first recompilation of frame 0). Inside it ``Pregraph bytecode``, ``AOTDispatcher Runtime Wrapper
  Prologue``, ``CompiledFunction`` (AOTAutograd, when gradients are needed) and ``## Call
  CompiledFxGraph <hash> ##`` (one Inductor graph). A graph break's resume frame runs as a region of
  its own (``1/0``) nested *inside* the region of the frame that broke.
- Inside a graph: the ATen operators Inductor calls (extern kernels such as ``aten::addmm``, ops it
  falls back to), a range named after each Triton kernel around its launch (``triton_poi_fused_..``,
  GPU), and, only with ``torch._inductor.config.cpp.enable_kernel_profile``, one per C++ kernel
  (``graph_0_cpp_fused_..``; by default the CPU kernels leave no range of their own).
- The backward runs outside any region: ``autograd::engine::evaluate_function:
  CompiledFunctionBackward`` > ``CompiledFunctionBackward`` > ``## Call CompiledFxGraph <hash> ##``.
  The trace does not say which frame a backward belongs to, so every compiled backward is one row.
- A compile inside the window: ranges ``dynamo`` > ``entire_frame_compile`` >
  ``_compile.compile_inner (dynamo_timed)`` > ``compile_attempt_0``, ``inductor_compile`` (or
  ``AOTAutogradCache.inductor_load`` on a cache hit), ..., with annotations such as
  ``dynamo_data: compile_id=0/1``. Older torch names the range ``_compile.<locals>.compile_inner``.

Definitions:

- A **region** is a ``Torch-Compiled Region`` or ``CompiledFunctionBackward`` range, or any other
  compiled marker (``operators.COMPILED_MARKERS``) that no marker encloses (traces of torch 2.0 hold
  only ``CompiledFunction``). Rows are by name: ``F/C`` for a Torch-Compiled Region, else the range's
  name. ``cpu_us``: the total time of its ranges; ``self_cpu_us``: that less the regions nested in it.
- Kernels are attributed as the operator view does (``operators.kernel_operators``: launch call ->
  innermost operator); a kernel belongs to the innermost region enclosing its operator.
  ``triton_gpu_us`` and ``extern_gpu_us`` split the time of kernels inside regions: Triton kernels
  (Inductor's ``triton_*`` names, or a kernel launched from a range of its own name) and the rest
  (cuBLAS, cuDNN, ATen kernels of extern and fallback ops); ``outside_gpu_us``: kernels in no region.
- ``fused_ops``: the ATen ops of an Inductor kernel name (``split_fused_ops``). ``cpu_kernels``:
  ranges named as Inductor kernels (C++ kernels, Triton launches) with their CPU time; ``graphs``:
  each ``CompiledFxGraph`` with the time of the operators it calls directly (``extern_cpu_us``) and
  of its kernel ranges (``kernel_cpu_us``); the rest of its time is generated code not recorded.
- ``dynamo.recompilations``: the compile ids ``F/C`` with ``C > 0`` the trace names (region names,
  ``compile_id=`` annotations); ``dynamo.compiles``: the ``_compile.*compile_inner`` ranges (one per
  compile), the compiles that ran inside the window, with the ids their annotations name.
  ``python_us_in_regions`` (with ``python_function`` events): the time inside regions when the
  innermost open event of the thread (the last one begun, as Python frames and operator ranges do
  not always nest) is a Python frame.
- Names: CPU ranges and Triton names as the trace spells them; other kernels ``name`` demangled,
  ``raw_name`` as recorded. Rows merge ranks. Memcpy and memset are no kernels here.
"""

from __future__ import annotations

import functools
import logging
import re
import sys
from typing import Any, NamedTuple

import numpy as np

from cuda_tracer.model.array_sets import distinct_codes
from cuda_tracer.model.correlate import Correlation
from cuda_tracer.model.events import LAUNCH_KINDS, EventBatch, Kind, kinds_in

from ...names import demangle
from ..summary_schema.sections import Compiled, CompiledRegion, Dynamo
from .operators import COMPILED_MARKERS, OPERATOR_KINDS, attribution, compiled_ancestors
from .time_nesting import parents

log = logging.getLogger(__name__)

REGION = "Torch-Compiled Region"
BACKWARD = "CompiledFunctionBackward"
CACHE_LOOKUP = "TorchDynamo Cache Lookup"
GRAPH = "## Call CompiledFxGraph"
KINDS = {"poi": "pointwise", "red": "reduction", "per": "persistent_reduction", "tem": "template",
         "for": "foreach", "spl": "split_scan", "unk": "unknown"}
"""Inductor's kernel categories, by the three letters its Triton kernel names carry."""
_INDUCTOR = re.compile(r"(?:graph_\d+_)?(triton|cpp)_(?:(poi|red|per|tem|for|spl|unk)_)?(.*)")
_FUSED = re.compile(r"fused_(.+)_\d+")
_COMPILE_ID = re.compile(r"compile_id=([^\s,]+)")
_ID = re.compile(r"!?(?:\d+/)*\d+/(\d+)(?:_\d+)?")
FALLBACK_OPS = frozenset("""
_adaptive_avg_pool2d _adaptive_avg_pool2d_backward _embedding_bag _log_softmax
_log_softmax_backward_data _native_batch_norm_legit _native_batch_norm_legit_functional
_native_batch_norm_legit_no_training _softmax _softmax_backward_data _to_copy _unsafe_index
_unsafe_index_put _unsafe_view abs add addmm alias amax amin any arange argmax as_strided
as_strided_scatter avg_pool2d avg_pool2d_backward bernoulli bitwise_and bitwise_not bitwise_or bmm
cat clamp clamp_max clamp_min clone constant_pad_nd convolution convolution_backward copy cos cumsum
div embedding embedding_dense_backward empty empty_like eq erf exp expand fill full full_like ge gelu
gelu_backward gt hardtanh hardtanh_backward index index_put index_select le leaky_relu
leaky_relu_backward log logical_not lt masked_fill max max_pool2d_with_indices
max_pool2d_with_indices_backward maximum mean min minimum mm mul native_batch_norm
native_batch_norm_backward native_dropout native_dropout_backward native_group_norm
native_group_norm_backward native_layer_norm native_layer_norm_backward ne neg new_empty new_ones
new_zeros nll_loss_backward nll_loss_forward ones ones_like permute pow reciprocal relu repeat rsqrt
rsub scalar_tensor scatter scatter_add select select_backward select_scatter sigmoid
sigmoid_backward silu silu_backward sin slice slice_backward slice_scatter sqrt squeeze sub sum t
tanh tanh_backward threshold_backward transpose unsqueeze upsample_bilinear2d upsample_nearest2d
var var_mean view where zeros zeros_like flex_attention flex_attention_backward
""".split())
"""Op names used when torch is not importable (ops whose names hold underscores matter most)."""


class KernelName(NamedTuple):
    """What an Inductor kernel's name says: its backend, kind and the ops it fused."""

    triton: bool
    kind: str
    fused_ops: tuple[str, ...]
    sure: bool
    """False when part of the name is no known op name (``split_fused_ops``)."""


@functools.lru_cache(maxsize=1)
def known_ops() -> frozenset[str]:
    """The op names Inductor may put in a kernel name: ``FALLBACK_OPS``, with every registered op's
    name without namespace and overload (``aten::_to_copy.out`` -> ``_to_copy``) when torch is
    already imported (a summary never imports it: that costs seconds; the built-in list splits every
    kernel name of the repository's traces the same way)."""
    return _known_ops(sys.modules.get("torch") is not None)


@functools.lru_cache(maxsize=2)
def _known_ops(with_torch: bool) -> frozenset[str]:
    names = set(FALLBACK_OPS)
    torch: Any = sys.modules.get("torch") if with_torch else None
    try:
        if torch is not None:
            names.update(n.split("::", 1)[-1].split(".", 1)[0] for n in torch._C._dispatch_get_all_op_names())
    except Exception:  # a broken or partial torch: the built-in list alone
        log.debug("torch's op names could not be read; the built-in list is used", exc_info=True)
    return frozenset(names)


MAX_NAME_PIECES = 10
"""The most ``_``-separated pieces one op name has (``_fused_moving_avg_obs_fq_helper_functional``: 8)."""
MAX_SPLIT_PIECES = 256
"""Fused-op texts of more pieces are left whole (a kernel name has a few dozen at most)."""


@functools.lru_cache(maxsize=4096)
def split_fused_ops(text: str, known: frozenset[str] | None = None) -> tuple[tuple[str, ...], bool]:
    """The op names joined by ``_`` in ``text`` (``"_to_copy_add"`` -> ``("_to_copy", "add")``) and
    whether every one is a known op name (``known_ops()`` by default).

    Inductor joins the ops' names, sorted and each once, with ``_``; names that hold ``_`` themselves
    make the split ambiguous. Of all the ways to cut ``text`` at underscores the one chosen has, in
    order of importance: the fewest pieces in names that are not known ops; names in ascending order
    (as Inductor sorts them); the fewest names (``index_put`` over ``index``, ``put``). When unsure (a
    part is no known name) the unknown pieces between known names stay together as one name."""
    known = known_ops() if known is None else known
    pieces = text.split("_")
    n = len(pieces)
    if n > MAX_SPLIT_PIECES:  # no kernel Inductor names: a hostile trace's, left whole
        return (text,), False
    Cost = tuple[int, int, int, tuple[str, ...]]  # unknown pieces, not ascending, names; the names
    # best[i][j]: the best cut of pieces[:j] whose last name is pieces[i:j] (the last name decides
    # whether the next one ascends, so it is part of the state)
    best: list[list[Cost | None]] = [[None] * (n + 1) for _ in range(n + 1)]
    for j in range(1, n + 1):
        for i in range(max(0, j - MAX_NAME_PIECES), j):
            name = "_".join(pieces[i:j])
            if not name:
                continue
            unknown = 0 if name in known else j - i
            before: list[Cost] = [(0, 0, 0, ())] if i == 0 else \
                [c for c in (row[i] for row in best[max(0, i - MAX_NAME_PIECES):i]) if c]
            for c in before:
                cand = (c[0] + unknown, c[1] + int(bool(c[3]) and c[3][-1] >= name), c[2] + 1, c[3] + (name,))
                current = best[i][j]
                if current is None or cand[:3] < current[:3]:
                    best[i][j] = cand
    ends = [c for c in (row[n] for row in best) if c]
    if not ends:
        return (text,), False
    final = min(ends, key=lambda c: c[:3])
    return final[3], final[0] == 0


def parse_kernel_name(name: str) -> KernelName | None:
    """What Inductor's name for a kernel says (``triton_{poi,red,per,tem,..}_fused_<ops>_<n>``,
    ``cpp_fused_<ops>_<n>``, ``graph_<g>_cpp_..`` as C++ kernel ranges are named), or None for a name
    Inductor did not make. Names without the ops (``triton_poi__0``, torch 2.0's ``triton__0d1d2d``)
    give no ``fused_ops``."""
    m = _INDUCTOR.fullmatch(name)
    if m is None:
        return None
    backend, category, rest = m.groups()
    kind = "cpp" if backend == "cpp" else KINDS[category] if category else "unknown"
    fused = _FUSED.fullmatch(rest)
    if fused is None:
        return KernelName(backend == "triton", kind, (), True)
    return KernelName(backend == "triton", kind, *split_fused_ops(fused.group(1)))


def region_label(name: str) -> str:
    """A region row's name: ``F/C`` for ``Torch-Compiled Region: F/C``, else the range's name."""
    return name[len(REGION):].lstrip(": ") if name.startswith(REGION) else name


def compile_index(compile_id: str) -> int | None:
    """``C`` of a compile id ``F/C`` (``0/1``, ``0/1_1`` for a restarted analysis, ``!0/0/1`` under
    compiled autograd), or None when ``compile_id`` is not one."""
    m = _ID.fullmatch(compile_id)
    return int(m.group(1)) if m else None


def _innermost(parent: np.ndarray, flag: np.ndarray, start: np.ndarray) -> np.ndarray:
    """For each of ``start`` (indices, -1 for none): the first index on its parent chain, itself
    included, whose ``flag`` is set, or -1."""
    out = np.full(len(start), -1, np.int64)
    if not flag.any():  # (eager code: no region at all)
        return out
    cur = start.copy()
    live = np.flatnonzero(cur >= 0)
    while len(live):
        hit = flag[cur[live]]
        out[live[hit]] = cur[live[hit]]
        live = live[~hit]
        cur[live] = parent[cur[live]]
        live = live[cur[live] >= 0]
    return out


def _groups(label: np.ndarray, name: np.ndarray, values: np.ndarray) -> list[tuple[int, int, int, list[float]]]:
    """Rows grouped by (label, name id): ``(label, name id, count, values summed)`` per group;
    ``values`` has one column per quantity."""
    if not len(label):
        return []
    keys, inv = np.unique((label.astype(np.int64) << 32) | name.astype(np.int64), return_inverse=True)
    inv = inv.reshape(-1)
    counts = np.bincount(inv, minlength=len(keys))
    sums = np.stack([np.bincount(inv, weights=values[:, c], minlength=len(keys))
                     for c in range(values.shape[1])], 1)
    return [(k >> 32, k & 0xFFFFFFFF, c, s)
            for k, c, s in zip(keys.tolist(), counts.tolist(), sums.tolist())]


def compiled(batch: EventBatch, corr: Correlation) -> Compiled:
    """The ``compiled`` section (see the module docstring): ``{regions: [{name, pass, calls, cpu_us,
    self_cpu_us, gpu_us, kernels: [{name, raw_name, triton, fused_ops, fused_ops_sure, kind, calls,
    gpu_us}], cpu_kernels: [{name, triton, fused_ops, fused_ops_sure, kind, calls, cpu_us}], graphs:
    [{name, calls, cpu_us, extern_cpu_us, kernel_cpu_us}]}], triton_gpu_us, extern_gpu_us,
    outside_gpu_us, dynamo: {cache_lookups: {count, cpu_us}, compiles: {count, cpu_us, ids},
    recompilations: {count, ids}, python_us_in_regions?}}``, regions and kernels by GPU time."""
    ops, krows, kop, parent = attribution(batch, corr)
    dur = batch.duration_ns
    uniq, inverse = distinct_codes(batch.name[ops], len(batch.strings))
    texts = [batch.strings[i] for i in uniq.tolist()]
    parsed = [parse_kernel_name(t) for t in texts]

    def flag(values: list[bool]) -> np.ndarray:
        return np.array(values, bool)[inverse] if len(ops) else np.zeros(0, bool)

    primary = flag([t.startswith((REGION, BACKWARD)) for t in texts])
    outer = compiled_ancestors(batch, corr)
    head = primary | (flag([t.startswith(COMPILED_MARKERS) for t in texts]) & (outer == np.arange(len(ops))))
    region = _innermost(parent, head, np.arange(len(ops)))  # each op's innermost region (an op index)
    heads = np.flatnonzero(head)
    label_names = sorted({region_label(texts[i]) for i in inverse[heads].tolist()})
    label_ids = {name: i for i, name in enumerate(label_names)}
    label = np.full(len(ops), -1, np.int64)  # per op: the label of its region
    label[heads] = [label_ids[region_label(texts[i])] for i in inverse[heads].tolist()]
    label = np.where(region >= 0, label[np.maximum(region, 0)], -1)
    enclosing = _innermost(parent, head, parent[heads])  # the region each region is nested in
    nested = np.zeros(len(ops))
    np.add.at(nested, enclosing[enclosing >= 0], dur[ops[heads[enclosing >= 0]]])
    head_dur = dur[ops[heads]].astype(np.float64)
    rows: list[CompiledRegion] = [
        {"name": name, "pass": "backward" if name.startswith(BACKWARD) else "forward", "calls": 0,
         "cpu_us": 0.0, "self_cpu_us": 0.0, "gpu_us": 0.0, "kernels": [], "cpu_kernels": [], "graphs": []}
        for name in label_names]
    for lab, _, calls, (cpu, own) in _groups(label[heads], np.zeros(len(heads)),
                                              np.stack([head_dur, head_dur - nested[heads]], 1)):
        rows[lab]["calls"], rows[lab]["cpu_us"], rows[lab]["self_cpu_us"] = calls, cpu / 1e3, own / 1e3

    kdur = dur[krows].astype(np.float64)
    klabel = np.full(len(krows), -1, np.int64)
    own_name = np.zeros(len(krows), bool)  # launched from a range named as the kernel (Triton's)
    if len(ops):
        op = ops[np.maximum(kop, 0)]
        klabel = np.where(kop >= 0, label[np.maximum(kop, 0)], -1)
        own_name = (kop >= 0) & (batch.name[op] == batch.name[krows])
    inside = klabel >= 0
    totals = {True: 0.0, False: 0.0}
    for lab, name_id, calls, (gpu, owned) in _groups(klabel[inside], batch.name[krows[inside]],
                                                      np.stack([kdur, own_name], 1)[inside]):
        raw = batch.strings[name_id]
        p = parse_kernel_name(raw)
        triton = bool(owned) or (p is not None and p.triton)
        totals[triton] += gpu / 1e3
        rows[lab]["gpu_us"] += gpu / 1e3
        rows[lab]["kernels"].append({
            "name": demangle(raw), "raw_name": raw, "triton": triton,
            "fused_ops": list(p.fused_ops if p else ()), "fused_ops_sure": p.sure if p else True,
            "kind": p.kind if p else "unknown" if triton else "extern", "calls": calls, "gpu_us": gpu / 1e3})

    is_kernel = flag([p is not None for p in parsed])
    at = np.flatnonzero(is_kernel & (label >= 0))
    for lab, name_id, calls, (cpu,) in _groups(label[at], batch.name[ops[at]], dur[ops[at]][:, None]):
        p = parse_kernel_name(batch.strings[name_id])
        assert p is not None
        rows[lab]["cpu_kernels"].append({"name": batch.strings[name_id], "triton": p.triton,
                                         "fused_ops": list(p.fused_ops), "fused_ops_sure": p.sure,
                                         "kind": p.kind, "calls": calls, "cpu_us": cpu / 1e3})
    at = np.flatnonzero(flag([t.startswith(GRAPH) for t in texts]) & (label >= 0))
    child_time = np.zeros((len(ops), 2))  # per op: its direct children's time (extern ops, kernels)
    child = np.flatnonzero(parent >= 0) if len(at) else np.zeros(0, np.int64)
    np.add.at(child_time, (parent[child], is_kernel[child].astype(np.int64)), dur[ops[child]])
    for lab, name_id, calls, (cpu, extern, kernel) in _groups(
            label[at], batch.name[ops[at]], np.concatenate([dur[ops[at]][:, None], child_time[at]], 1)):
        rows[lab]["graphs"].append({"name": batch.strings[name_id][len(GRAPH):].strip(" #"), "calls": calls,
                                    "cpu_us": cpu / 1e3, "extern_cpu_us": extern / 1e3,
                                    "kernel_cpu_us": kernel / 1e3})

    for row in rows:
        row["kernels"].sort(key=lambda r: (-r["gpu_us"], r["name"]))
        row["cpu_kernels"].sort(key=lambda r: (-r["cpu_us"], r["name"]))
        row["graphs"].sort(key=lambda r: (-r["cpu_us"], r["name"]))
    rows.sort(key=lambda r: (-r["gpu_us"], -r["cpu_us"], r["name"]))
    return {"regions": rows, "triton_gpu_us": totals[True], "extern_gpu_us": totals[False],
            "outside_gpu_us": float(kdur[~inside].sum()) / 1e3,
            "dynamo": _dynamo(batch, ops, texts, inverse, label_names, heads[enclosing < 0])}


def _dynamo(batch: EventBatch, ops: np.ndarray, texts: list[str], inverse: np.ndarray,
            labels: list[str], top: np.ndarray) -> Dynamo:
    """Dynamo's part: guard evaluation, compiles inside the window, recompilations, Python time."""
    dur = batch.duration_ns
    name_flags = np.array([[t == CACHE_LOOKUP, t.startswith("_compile.") and "compile_inner" in t]
                           for t in texts], bool).reshape(-1, 2)
    lookups = np.flatnonzero(name_flags[inverse, 0]) if len(ops) else np.zeros(0, np.int64)
    compiles = np.flatnonzero(name_flags[inverse, 1]) if len(ops) else np.zeros(0, np.int64)
    compile_ids = sorted({m.group(1) for t in texts for m in _COMPILE_ID.finditer(t)}, key=id_order)
    seen = {*compile_ids, *labels}
    recompiled = sorted((i for i in seen if (compile_index(i) or 0) > 0), key=id_order)
    out: Dynamo = {
        "cache_lookups": {"count": int(len(lookups)), "cpu_us": float(dur[ops[lookups]].sum()) / 1e3},
        "compiles": {"count": int(len(compiles)), "cpu_us": float(dur[ops[compiles]].sum()) / 1e3,
                     "ids": compile_ids},
        "recompilations": {"count": len(recompiled), "ids": recompiled}}
    if (batch.kind == Kind.PYTHON_FUNCTION).any():
        out["python_us_in_regions"] = python_in_regions(batch, ops[top]) / 1e3
    return out


def id_order(compile_id: str) -> tuple[list[int], str]:
    return [int(n) for n in re.findall(r"\d+", compile_id)], compile_id


def python_in_regions(batch: EventBatch, region_rows: np.ndarray) -> int:
    """Nanoseconds inside the ranges ``region_rows`` (none nested in another) during which the
    innermost open event of their thread is a ``python_function`` event; innermost: the last begun
    of the events open then (Python frames, operators, annotations, launch calls)."""
    kinds = (*OPERATOR_KINDS, *LAUNCH_KINDS, Kind.PYTHON_FUNCTION)
    rows = np.flatnonzero(kinds_in(batch.kind, kinds))
    if not len(region_rows) or not len(rows):
        return 0
    _, where = parents(batch, region_rows, rows)
    rows, where = rows[where >= 0], where[where >= 0]
    start = batch.start_ns[rows]
    end = np.minimum(batch.end_ns[rows], batch.end_ns[region_rows[where]])
    order = np.lexsort((-end, start, where))
    total = 0
    stack: list[tuple[int, bool]] = []  # (end, is python) of the events begun and maybe not ended
    now, group = 0, -1
    python = (batch.kind[rows] == Kind.PYTHON_FUNCTION)[order].tolist()
    for s, e, g, py in zip(start[order].tolist(), end[order].tolist(), where[order].tolist(), python):
        if g != group:  # a new region: what is left of the last one runs to its end
            total += _run(stack, now, None)
            stack, now, group = [], s, g
        total += _run(stack, now, s)
        now = max(now, s)
        stack.append((e, py))
    return total + _run(stack, now, None)


def _run(stack: list[tuple[int, bool]], now: int, until: int | None) -> int:
    """Advance from ``now`` to ``until`` (None: until the stack empties), popping ended events;
    returns the Python time met on the way."""
    python = 0
    while stack and (until is None or now < until):
        end, py = stack[-1]
        if end <= now:
            stack.pop()
            continue
        step = end if until is None else min(end, until)
        python += (step - now) if py else 0
        now = step
    return python
