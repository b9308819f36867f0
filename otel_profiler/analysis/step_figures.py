"""Per-trace figures for the root span of each exported trace (``train.step`` or a window): the
operators whose kernels took the most GPU time in it (as the operator view attributes kernels), the
FLOPs of the operators that start in its range (``flops.costs.operator_flops``; with recorded shapes), and the GPU memory peak (largest ``Total Allocated`` / ``Total Reserved`` of the allocator's
``[memory]`` events inside the trace's time range, over the devices of the batch; traces that
record no totals give none)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cuda_tracer.model.correlate import Correlation
from cuda_tracer.model.events import MISSING, EventBatch, Kind

from .flops.costs import operator_flops
from .memory.allocator import gpu_memory_rows
from .attribution.operators import kernel_operators


@dataclass
class RootFigures:
    top_operators: list[list[str]]  # per trace, by GPU time
    peak_allocated: np.ndarray  # per trace, bytes; -1: no memory event in the trace
    peak_reserved: np.ndarray  # per trace, bytes; -1: none
    flops: np.ndarray  # per trace: FLOPs of the counted operators in it (0: none, or no shapes)
    flops_by_dtype: dict[str, float]  # the batch's FLOPs by data type (which peak counts)


def root_figures(batch: EventBatch, corr: Correlation, trace_row: np.ndarray, start: np.ndarray,
                 end: np.ndarray, top: int) -> RootFigures:
    """``trace_row``: the trace of each batch row (-1: none); ``start``/``end``: each trace's range."""
    n = len(start)
    tops: list[list[str]] = [[] for _ in range(n)]
    if top > 0:
        krows, op = kernel_operators(batch, corr)
        ok = (op >= 0) & (trace_row[krows] >= 0)
        ok[ok] = batch.kind[op[ok]] != Kind.STEP
        if ok.any():
            width = len(batch.strings) + 1
            key = trace_row[krows[ok]] * width + batch.name[op[ok]]
            ukey, inv = np.unique(key, return_inverse=True)
            total = np.bincount(inv.reshape(-1), weights=batch.duration_ns[krows[ok]].astype(np.float64))
            for k in np.lexsort((-total, ukey // width)).tolist():
                t = int(ukey[k] // width)
                if len(tops[t]) < top:
                    tops[t].append(batch.strings[int(ukey[k] % width)])
    alloc = np.full(n, -1, np.int64)
    reserved = np.full(n, -1, np.int64)
    m = gpu_memory_rows(batch)
    absolute = ~m["relative"]  # traces without totals give no absolute peak
    rows, allocated, reserved_bytes = m["rows"][absolute], m["allocated"][absolute], m["reserved"][absolute]
    if len(rows) and n:
        t = batch.start_ns[rows]  # time order
        lo, hi = np.searchsorted(t, start, "left"), np.searchsorted(t, end, "right")
        for i in np.flatnonzero(hi > lo).tolist():
            alloc[i] = int(allocated[lo[i]:hi[i]].max())
            res = reserved_bytes[lo[i]:hi[i]]
            res = res[res != MISSING]
            reserved[i] = int(res.max()) if len(res) else -1
    op_rows, op_flops, by_dtype = operator_flops(batch, corr)
    flops = np.zeros(n)
    if len(op_rows) and n:
        trace = _trace_at(batch.start_ns[op_rows], start, end)
        ok = trace >= 0
        np.add.at(flops, trace[ok], op_flops[ok])
    return RootFigures(tops, alloc, reserved, flops, by_dtype)


def _trace_at(times: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The latest-starting trace that began at or before each time, if its range still holds the
    time, else -1. A step's trace spans the step, so an operator counts in the step it starts in,
    as the summary's ``by_step`` counts it; steps never overlap, and an operator between steps
    counts in no trace."""
    order = np.argsort(start, kind="stable")
    at = np.searchsorted(start[order], times, "right") - 1
    trace = np.where(at >= 0, order[np.maximum(at, 0)], -1)
    inside = (trace >= 0) & (times < end[np.maximum(trace, 0)])
    return np.where(inside, trace, -1)
