"""The operator view: every PyTorch operator (``aten::*``, autograd nodes, user annotations), its calls,
CPU time, and the GPU time of the kernels it launched, with the kernels of CUDA graphs and compiled
regions gathered under their graph or region.

Definitions:

- Operators are the CPU ops, user annotations (``record_function``) and ``ProfilerStep#N`` ranges of a
  trace (step ranges are folded into one ``ProfilerStep#*`` row). Nesting is by time on one thread:
  an operator's *parent* is the innermost operator on the same (rank, pid, tid) that encloses it.
  torch's own ranges (steps, ``Optimizer.step#...``, ``enumerate(DataLoader)#...``, compiled
  regions: ``names.torch_range``) nest and take kernels as the others do; their rows say what they
  mark (``range``), so that reports show them apart from operators and the user's annotations.
- **Total CPU time**: the sum of an operator's durations; **self CPU time**: that minus the time of
  its direct children. A step has none: its time outside the operators inside it is no operator's
  work (all of it, in steps whose operators were not captured).
- A kernel is attributed to one operator, the *innermost*: kernel -> launch call (CUPTI correlation
  id, see ``cuda_tracer.model.correlate``) -> the operator whose external id equals the launch call's.
  **Self GPU time** is the time of the kernels attributed to an operator, **total GPU time** adds
  those of its descendants. Self GPU times therefore sum to at most the kernel total; kernels with
  no launch call in the trace, or whose launch names no operator, are counted apart.
- **Regions**: kernels of a CUDA graph (a ``graph id`` on the kernel, or launched by a graph launch
  call) are gathered per graph; kernels whose operator runs inside a compiled region
  (``Torch-Compiled Region``, ``CompiledFunction``, ``## Call CompiledFxGraph``) per region;
  Inductor/Triton kernels (``triton_*``) with no operator under ``[compiled, no operator]``.
- **Call stacks**: where the trace recorded Python stacks (``with_stack=True``), each operator name
  lists its most frequent stacks (``call_stacks``, innermost frame first): the ``Call stack`` string
  of older PyTorch, else the ``python_function`` events enclosing the operator (``python_stacks``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from cuda_tracer.model.array_sets import distinct, distinct_codes
from cuda_tracer.model.correlate import Correlation, correlate
from cuda_tracer.model.events import MISSING, EventBatch, Kind, kinds_in

from ...names import demangle, torch_range
from .python_stacks import top_stacks
from .time_nesting import depths, parents

if TYPE_CHECKING:  # (the summary's types: a span export need not import them, 10 ms)
    from ..summary_schema.sections import CallStack, OperatorRow, OperatorTable, RegionRow, TopKernel

OPERATOR_KINDS = (Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.STEP)
COMPILED_MARKERS = ("Torch-Compiled Region", "CompiledFunction", "## Call CompiledFxGraph")
STEP_ROW = "ProfilerStep#*"
TOP_KERNELS = 5
EVERY_KERNEL = 1 << 30
"""``top_kernels`` for tables that list all their kernels (cut after merging ranks)."""
TOP_STACKS = 3
_KEY_SHIFT = 40


def operator_rows(batch: EventBatch) -> np.ndarray:
    return np.flatnonzero(kinds_in(batch.kind, OPERATOR_KINDS))


def annotation_rows(batch: EventBatch, kind: Kind = Kind.USER_ANNOTATION) -> np.ndarray:
    """Rows of the annotations of ``kind`` that the user's code opened: torch's own ranges, recorded
    the same way, left out (see the module docstring)."""
    rows = np.flatnonzero(batch.kind == kind)
    names = distinct(batch.name[rows])  # each name checked once
    torchs = names[[torch_range(batch.strings[i]) is not None for i in names.tolist()]]
    return rows[~np.isin(batch.name[rows], torchs)] if len(torchs) else rows


def operator_of_gpu_op(batch: EventBatch, corr: Correlation, ops: np.ndarray) -> np.ndarray:
    """For each GPU op of ``corr.gpu_rows``: the index (into ``ops``) of the operator whose external
    id equals its launch call's and whose time span holds the call, or -1."""
    out = np.full(len(corr.gpu_rows), -1, np.int64)
    launch = corr.launch_of_gpu
    linked = np.flatnonzero(launch >= 0)
    ext = batch.external_id
    has_ext = ext[ops] != MISSING
    if not len(linked) or not has_ext.any():
        return out
    table = np.flatnonzero(has_ext)
    table_keys = (batch.rank[ops[table]].astype(np.int64) << _KEY_SHIFT) | ext[ops[table]]
    launches = launch[linked]
    keys = (batch.rank[launches].astype(np.int64) << _KEY_SHIFT) | ext[launches]
    order = np.argsort(table_keys)  # external ids of operators are unique
    sorted_keys = table_keys[order]
    pos = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
    op = ops[table[order[pos]]]
    found = (sorted_keys[pos] == keys) & (ext[launches] != MISSING) & \
        (batch.start_ns[op] <= batch.start_ns[launches]) & (batch.start_ns[launches] <= batch.end_ns[op])
    out[linked[found]] = table[order[pos[found]]]
    return out


def _op_names(batch: EventBatch, ops: np.ndarray) -> np.ndarray:
    """Name id of each operator, ``ProfilerStep#N`` folded into one name (id ``len(strings)``)."""
    names = batch.name[ops].astype(np.int64)
    names[batch.kind[ops] == Kind.STEP] = len(batch.strings)
    return names


def _name(batch: EventBatch, name_id: int) -> str:
    return STEP_ROW if name_id == len(batch.strings) else batch.strings[name_id]


def _attribute(batch: EventBatch, corr: Correlation) -> tuple[np.ndarray, ...]:
    """(operator rows, kernel rows, their launch rows, each kernel's operator index or -1, each
    operator's parent index, the kernels attributed by the enclosing operator); made once per
    correlation (the operator view, FLOPs and compiled regions read it), kept in it."""
    return _kept(corr, "_attribution", batch, lambda: _attribution_of(batch, corr))


def _kept(corr: Correlation, key: str, batch: EventBatch, make: Callable[[], Any]) -> Any:
    """``make()``, made once per correlation of ``batch`` and kept in it under ``key``; its arrays
    are made read-only, as every reader of the correlation shares them."""
    cached = corr.__dict__.get(key)
    if cached is not None and cached[0] is batch:
        return cached[1]
    found = make()
    for array in found if isinstance(found, tuple) else (found,):
        array.flags.writeable = False
    corr.__dict__[key] = (batch, found)
    return found


def _attribution_of(batch: EventBatch, corr: Correlation) -> tuple[np.ndarray, ...]:
    ops = operator_rows(batch)
    is_kernel = batch.kind[corr.gpu_rows] == Kind.KERNEL
    krows = corr.gpu_rows[is_kernel]
    klaunch = corr.launch_of_gpu[is_kernel]
    kop = operator_of_gpu_op(batch, corr, ops)[is_kernel]
    by_time = np.flatnonzero((kop < 0) & (klaunch >= 0))
    launches, where = np.unique(klaunch[by_time], return_inverse=True)
    parent, launch_op = parents(batch, ops, launches)
    kop[by_time] = launch_op[where.reshape(-1)]
    return ops, krows, klaunch, kop, parent, by_time


def compiled_ancestors(batch: EventBatch, corr: Correlation) -> np.ndarray:
    """``compiled_ancestor`` of the attribution's operators, made once per correlation (the
    operator view's regions and the compiled-code view read it), kept in it."""
    ops, _, _, _, parent, _ = _attribute(batch, corr)
    return _kept(corr, "_compiled_ancestors", batch, lambda: compiled_ancestor(batch, ops, parent))


def attribution(batch: EventBatch, corr: Correlation) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(operator rows, kernel rows, each kernel's operator index into the operator rows or -1, each
    operator's parent index or -1): the operator view's attribution, for other analyses."""
    ops, krows, _, kop, parent, _ = _attribute(batch, corr)
    return ops, krows, kop, parent


def kernel_operators(batch: EventBatch, corr: Correlation) -> tuple[np.ndarray, np.ndarray]:
    """(kernel rows, the row of the innermost operator that launched each, or -1), as the operator
    view attributes them (``ProfilerStep#N`` ranges included)."""
    ops, krows, _, kop, _, _ = _attribute(batch, corr)
    if not len(ops):
        return krows, np.full(len(krows), -1, np.int64)
    return krows, np.where(kop >= 0, ops[np.maximum(kop, 0)], -1)


def operators(batch: EventBatch, corr: Correlation | None = None, top_kernels: int = TOP_KERNELS
              ) -> OperatorTable:
    """The operator table (see the module docstring): ``{count, kernel_total_us, attributed_us,
    unattributed: {...}, by_name: [...], regions: [...]}``, rows by total GPU time, then CPU time."""
    corr = corr if corr is not None else correlate(batch)
    ops, krows, klaunch, kop, parent, by_time = _attribute(batch, corr)
    dur = batch.duration_ns
    op_dur = dur[ops].astype(np.float64)
    child_time = np.zeros(len(ops))
    has_parent = parent >= 0
    np.add.at(child_time, parent[has_parent], op_dur[has_parent])

    kdur = dur[krows].astype(np.float64)
    self_gpu = np.zeros(len(ops))
    np.add.at(self_gpu, kop[kop >= 0], kdur[kop >= 0])
    total_gpu = _inclusive(self_gpu, parent)

    names = _op_names(batch, ops)
    uniq, inverse = distinct_codes(names, len(batch.strings) + 1)
    n = len(uniq)

    def per_name(values: np.ndarray) -> np.ndarray:
        return np.bincount(inverse, weights=values, minlength=n)

    calls = np.bincount(inverse, minlength=n)
    total_cpu, self_cpu = per_name(op_dur), per_name(op_dur - child_time)
    self_cpu[uniq == len(batch.strings)] = 0.0  # the steps (see the module docstring)
    self_g, total_g = per_name(self_gpu), per_name(total_gpu)
    kernel_count = np.bincount(inverse[kop[kop >= 0]], minlength=n) if len(kop) else np.zeros(n, int)
    top = _top_kernels(batch, krows[kop >= 0], kdur[kop >= 0], inverse[kop[kop >= 0]], top_kernels)
    kernel_total = float(kdur.sum()) / 1e3
    rows: list[OperatorRow] = [
        {"name": _name(batch, u), "calls": c, "total_cpu_us": tc / 1e3, "self_cpu_us": sc / 1e3,
         "self_gpu_us": sg / 1e3, "total_gpu_us": tg / 1e3, "kernels": k,
         "gpu_pct": 100.0 * sg / 1e3 / kernel_total if kernel_total else 0.0, "top_kernels": top.get(i, [])}
        for i, (u, c, tc, sc, sg, tg, k) in enumerate(zip(
                uniq.tolist(), calls.tolist(), total_cpu.tolist(), self_cpu.tolist(), self_g.tolist(),
                total_g.tolist(), kernel_count.tolist()))]
    for row in rows:
        if (marks := torch_range(row["name"])) is not None:
            row["range"] = marks
    for i, stacks in _call_stacks(batch, ops, inverse).items():
        rows[i]["call_stacks"] = stacks
    rows.sort(key=lambda r: (-r["self_gpu_us"], -r["total_gpu_us"], -r["total_cpu_us"], r["name"]))
    orphan = klaunch < 0
    no_op = (kop < 0) & ~orphan
    by_time_found = int((kop[by_time] >= 0).sum())
    return {"count": int(len(ops)), "kernel_total_us": kernel_total,
            "attributed_us": float(kdur[kop >= 0].sum()) / 1e3,
            "attributed_by": {"external_id": int((kop >= 0).sum()) - by_time_found,
                              "enclosing_operator": by_time_found},
            "unattributed": {"no_launch": {"kernels": int(orphan.sum()),
                                           "gpu_us": float(kdur[orphan].sum()) / 1e3},
                             "no_operator": {"kernels": int(no_op.sum()),
                                             "gpu_us": float(kdur[no_op].sum()) / 1e3}},
            "by_name": rows,
            "regions": _regions(batch, ops, compiled_ancestors(batch, corr), krows, klaunch, kop, kdur,
                                top_kernels)}


def _call_stacks(batch: EventBatch, ops: np.ndarray, inverse: np.ndarray, top: int = TOP_STACKS
                 ) -> dict[int, list[CallStack]]:
    """Per operator name index: its most frequent call stacks, ``[{stack: [frames, innermost
    first], calls}]``: the ``Call stack`` recorded per operator (``with_stack=True`` in older
    PyTorch), else the enclosing ``python_function`` events (current PyTorch)."""
    key = batch.name_id("call_stack")
    if key < 0:
        return top_stacks(batch, ops, inverse, top)
    hits = np.flatnonzero(batch.extra_key == key)
    pos = np.searchsorted(ops, batch.extra_row[hits])
    ok = pos < len(ops)
    ok[ok] = ops[pos[ok]] == batch.extra_row[hits][ok]
    counts: dict[int, dict[str, int]] = {}
    for h, p in zip(hits[ok].tolist(), pos[ok].tolist()):
        per = counts.setdefault(int(inverse[p]), {})
        stack = batch.extra_value[h]
        per[stack] = per.get(stack, 0) + 1
    return {i: [{"stack": s.split(";"), "calls": c}
                for s, c in sorted(per.items(), key=lambda sc: -sc[1])[:top]] for i, per in counts.items()}


def _inclusive(self_gpu: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Self values summed up the parent chain, deepest level first."""
    total = self_gpu.copy()
    if not (parent >= 0).any():
        return total
    depth = depths(parent)
    for level in range(int(depth.max()), 0, -1):
        at = np.flatnonzero(depth == level)
        np.add.at(total, parent[at], total[at])
    return total


def _top_kernels(batch: EventBatch, rows: np.ndarray, durs: np.ndarray, group: np.ndarray,
                 top: int) -> dict[int, list[TopKernel]]:
    """Per group index: its ``top`` kernels by total time, ``{name, raw_name, count, gpu_us}``."""
    if not len(rows):
        return {}
    keys, inv = np.unique((group.astype(np.int64) << 32) | batch.name[rows].astype(np.int64),
                          return_inverse=True)
    pairs = np.stack([keys >> 32, keys & 0xFFFFFFFF], 1)
    inv = inv.reshape(-1)
    sums = np.bincount(inv, weights=durs, minlength=len(pairs))
    counts = np.bincount(inv, minlength=len(pairs))
    out: dict[int, list[TopKernel]] = {}
    order = np.lexsort((-sums, pairs[:, 0]))
    for g, name_id, count, total in zip(pairs[order, 0].tolist(), pairs[order, 1].tolist(),
                                        counts[order].tolist(), sums[order].tolist()):
        lst = out.setdefault(g, [])
        if len(lst) < top:
            raw = batch.strings[name_id]
            lst.append({"name": demangle(raw), "raw_name": raw, "count": count, "gpu_us": total / 1e3})
    return out


def _regions(batch: EventBatch, ops: np.ndarray, compiled: np.ndarray, krows: np.ndarray,
             launch: np.ndarray, kop: np.ndarray, kdur: np.ndarray, top: int) -> list[RegionRow]:
    """Kernels gathered by CUDA graph and by compiled region (see the module docstring); ``compiled``:
    each operator's outermost compiled region (``compiled_ancestor``)."""
    region = np.full(len(krows), -1, np.int64)
    labels: dict[str, int] = {}
    kinds: dict[int, str] = {}

    def label(text: str, kind: str) -> int:
        if text not in labels:
            labels[text] = len(labels)
            kinds[labels[text]] = kind
        return labels[text]

    def assign(at: np.ndarray, texts: list[str], kind: str) -> None:
        """Give the kernels ``at`` the regions named ``texts`` (one per kernel), by distinct text."""
        uniq, inv = np.unique(np.asarray(texts, dtype=object), return_inverse=True)
        ids = np.array([label(str(t), kind) for t in uniq.tolist()], np.int64)
        region[at] = ids[inv.reshape(-1)]

    def assign_names(at: np.ndarray, name_ids: np.ndarray, kind: str) -> None:
        """``assign`` of the names ``name_ids``: each distinct one looked up once (labels made in
        the order of their texts, as ``assign`` makes them), with no string per kernel."""
        uniq, inv = distinct_codes(name_ids, len(batch.strings))
        texts = [batch.strings[i] for i in uniq.tolist()]
        ids = np.empty(len(uniq), np.int64)
        for j in sorted(range(len(texts)), key=texts.__getitem__):
            ids[j] = label(texts[j], kind)
        region[at] = ids[inv]

    graph = batch.graph_id[krows]
    graph_launch = np.array([i for i, s in enumerate(batch.strings) if "GraphLaunch" in s], np.int64)
    in_graph = np.flatnonzero((graph != MISSING) | np.isin(
        np.where(launch >= 0, batch.name[np.maximum(launch, 0)], -1), graph_launch))
    if len(in_graph):
        assign(in_graph, [f"CUDA graph {g}" if g != MISSING else "CUDA graph"
                          for g in graph[in_graph].tolist()], "cuda_graph")
    anc = np.full(len(kop), -1, np.int64)
    anc[kop >= 0] = compiled[kop[kop >= 0]]
    in_region = np.flatnonzero((region < 0) & (anc >= 0))
    if len(in_region):
        assign_names(in_region, batch.name[ops[anc[in_region]]], "compiled")
    loose = np.flatnonzero((region < 0) & (kop < 0))
    triton = [k for k, n in zip(loose.tolist(), batch.names(krows[loose])) if n.startswith("triton_")]
    if triton:
        assign(np.asarray(triton, np.int64), ["[compiled, no operator]"] * len(triton), "compiled")
    inside = region >= 0
    if not inside.any():
        return []
    top_k = _top_kernels(batch, krows[inside], kdur[inside], region[inside], top)
    gpu = np.bincount(region[inside], weights=kdur[inside], minlength=len(labels))
    count = np.bincount(region[inside], minlength=len(labels))
    out: list[RegionRow] = [{"name": text, "kind": kinds[i], "kernels": int(count[i]),
                             "gpu_us": float(gpu[i]) / 1e3, "top_kernels": top_k.get(i, [])}
                            for text, i in labels.items()]
    return sorted(out, key=lambda r: -r["gpu_us"])


def compiled_ancestor(batch: EventBatch, ops: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """For each operator: the index of the outermost compiled-region operator enclosing it (itself
    included), or -1."""
    marked = {i for i, s in enumerate(batch.strings) if s.startswith(COMPILED_MARKERS)}
    out = np.full(len(ops), -1, np.int64)
    if not marked:
        return out
    is_marked = np.isin(batch.name[ops], np.fromiter(marked, np.int64, len(marked)))
    cur = np.arange(len(ops))
    while (cur >= 0).any():
        live = cur >= 0
        hit = live & is_marked[np.maximum(cur, 0)]
        out[hit] = cur[hit]  # later (outer) hits overwrite inner ones
        cur[live] = parent[cur[live]]
    return out
