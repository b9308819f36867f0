"""Who encloses whom on a thread: the nesting of annotations and CPU ops, found for all intervals at
once (pointer jumping, with a stack walk for very deep nesting), and the innermost open scope at
a given time. The span model's parents come from here.
"""

from __future__ import annotations

import numpy as np

from cuda_tracer.model.array_sets import distinct
from cuda_tracer.model.events import MISSING, EventBatch


def innermost(starts: np.ndarray, ends: np.ndarray, parent: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For each time in ``t``: index of the innermost interval containing it, or -1.

    Intervals are sorted by (start, -end) and properly nested; ``parent`` is each interval's
    enclosing interval (-1: none).
    """
    j = np.searchsorted(starts, t, side="right") - 1
    while True:
        bad = np.flatnonzero((j >= 0) & (ends[np.maximum(j, 0)] <= t))
        if not len(bad):
            return j
        j[bad] = parent[j[bad]]


def nesting(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Enclosing interval of each interval (sorted by (start, -end)): the nearest earlier one still
    open at its start that ends no sooner. Found for all intervals at once by pointer jumping: while
    a candidate closed before the interval started or ends sooner, the interval takes the
    candidate's own candidate (everything skipped closed sooner still)."""
    n = len(starts)
    candidate = np.arange(-1, n - 1, dtype=np.int64)
    active = np.arange(n, dtype=np.int64)
    for _ in range(_JUMP_ROUNDS):
        if not len(active):
            return candidate
        c = candidate[active]
        c_end = ends[np.maximum(c, 0)]
        skip = (c >= 0) & ((c_end < ends[active]) | (c_end <= starts[active]))
        active = active[skip]
        candidate[active] = candidate[c[skip]]
    return nesting_walk(starts, ends)  # very deep nesting: the sequential walk is faster then


_JUMP_ROUNDS = 64


def nesting_walk(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """``nesting`` by a stack walk: one Python step per interval, whatever the depth."""
    parent = np.full(len(starts), -1, np.int64)
    stack: list[int] = []
    for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist())):
        while stack and (ends[stack[-1]] <= s or ends[stack[-1]] < e):
            stack.pop()
        if stack:
            parent[i] = stack[-1]
        stack.append(i)
    return parent


Forest = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # rows, starts, ends, enclosing


def thread_forests(batch: EventBatch, scopes: np.ndarray) -> dict[int, Forest]:
    """Per thread: its scopes sorted by (start, -end), their starts and ends, and each one's
    enclosing scope (an index into that order, -1: none). Computed once for the scopes' own parents
    and for the calls' parents."""
    out = {}
    tids = batch.tid[scopes]
    for tid in distinct(tids).tolist():
        rows = scopes[tids == tid]
        rows = rows[np.lexsort((-batch.end_ns[rows], batch.start_ns[rows]))]
        starts, ends = batch.start_ns[rows], batch.end_ns[rows]
        out[tid] = (rows, starts, ends, nesting(starts, ends))
    return out


def scope_parents(forests: dict[int, Forest], trace_row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(scope rows, enclosing scope row)``: same thread and same trace, else -1 (the trace root)."""
    rows_out, parents_out = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for rows, _, _, par in forests.values():
        prow = np.where(par >= 0, rows[np.maximum(par, 0)], -1)
        prow[(prow >= 0) & (trace_row[np.maximum(prow, 0)] != trace_row[rows])] = -1
        rows_out.append(rows)
        parents_out.append(prow)
    return np.concatenate(rows_out), np.concatenate(parents_out)


def parents_by_thread(forests: dict[int, Forest], rows: np.ndarray, anchor_t: np.ndarray,
                       anchor_tid: np.ndarray, trace_row: np.ndarray) -> np.ndarray:
    """Innermost scope on the anchor thread containing the anchor time (same trace), else -1."""
    out = np.full(len(rows), -1, np.int64)
    q_tid = anchor_tid[rows]
    for tid in distinct(q_tid).tolist():
        if tid == MISSING or tid not in forests:
            continue
        scope_rows, starts, ends, par = forests[tid]
        q = np.flatnonzero(q_tid == tid)
        j = innermost(starts, ends, par, anchor_t[rows[q]])
        prow = np.where(j >= 0, scope_rows[np.maximum(j, 0)], -1)
        prow[(prow >= 0) & (trace_row[np.maximum(prow, 0)] != trace_row[rows[q]])] = -1
        out[q] = prow
    return out
