"""Nesting by time on one thread: each event's innermost enclosing event (the parent of an
operator, a module call, a Python frame) and the depth of each event in that forest."""

from __future__ import annotations

import os

import numpy as np

from cuda_tracer.model.events import EventBatch

from ..stats import unique_rows

try:
    from . import _nesting
except ImportError:  # built without a C compiler: numpy's pointer jumping finds the same parents
    _nesting = None  # type: ignore[assignment]


def parents(batch: EventBatch, ops: np.ndarray, points: np.ndarray | None = None
            ) -> tuple[np.ndarray, np.ndarray]:
    """For each row of ``ops``: the index (into ``ops``) of its innermost enclosing operator on the
    same thread, or -1; and the same for each row of ``points`` (events such as launch calls, placed
    at their start time), which are never parents themselves.

    In start order (longer first at equal starts) the parent of an event is the nearest operator
    on the chain of its predecessor's enclosing operators that *encloses* it (ends after it starts
    and not before it ends): one pass with a stack (``_nesting.c``), or numpy pointer jumping."""
    points = np.zeros(0, np.int64) if points is None else points
    rows = np.concatenate([ops, points])
    start = batch.start_ns[rows]
    end = np.concatenate([batch.end_ns[ops], start[len(ops):]])
    is_point = np.concatenate((np.zeros(len(ops), bool), np.ones(len(points), bool)))
    thread = _thread_codes(batch, rows)
    order = _start_order(thread, start, end, is_point)
    s, e, pt = start[order], end[order], is_point[order]
    thread = thread[order]
    if native_nesting():
        ptr = np.empty(len(rows), np.int64)
        _nesting.enclosing(np.ascontiguousarray(thread, np.int64), np.ascontiguousarray(s, np.int64),
                           np.ascontiguousarray(e, np.int64), pt.view(np.uint8), ptr)
    else:
        ptr = _pointer_jumping(thread, s, e, pt)
    out = np.full(len(rows), -1, np.int64)
    out[order] = np.where(ptr >= 0, order[np.maximum(ptr, 0)], -1)
    return out[:len(ops)], out[len(ops):]


def native_nesting() -> bool:
    """Whether the one-pass nesting (``_nesting.c``) is built and not switched off
    (``OTEL_PROFILER_PURE_PYTHON``, which also switches off the native trace scanner)."""
    return _nesting is not None and os.environ.get("OTEL_PROFILER_PURE_PYTHON", "") in ("", "0")


def _pointer_jumping(thread: np.ndarray, s: np.ndarray, e: np.ndarray, pt: np.ndarray) -> np.ndarray:
    """The parents of events in start order (positions, -1 for none), by numpy pointer jumping:
    each pointer starts at the previous event and jumps to that event's pointer while it does not
    enclose; every event skipped encloses nothing the jumped-from event does not."""
    first = np.concatenate(([True], thread[1:] != thread[:-1])) if len(s) else np.zeros(0, bool)
    ptr = np.arange(-1, len(s) - 1)
    ptr[first] = -1
    live = np.flatnonzero(ptr >= 0)
    while len(live):
        p = ptr[live]
        miss = pt[p] | (e[p] < e[live]) | (e[p] <= s[live])
        live = live[miss]
        ptr[live] = ptr[ptr[live]]
        live = live[ptr[live] >= 0]
    return ptr


def _thread_codes(batch: EventBatch, rows: np.ndarray) -> np.ndarray:
    """One integer per row for its thread (rank, pid, tid), ordered as the threads are."""
    if not len(rows):
        return np.zeros(0, np.int64)
    columns = [batch.rank[rows].astype(np.int64), batch.pid[rows], batch.tid[rows]]
    low = [int(c.min()) for c in columns]
    spans = [int(c.max()) - lo + 1 for c, lo in zip(columns, low)]
    if spans[0] * spans[1] * spans[2] >= 2**62:  # ranges too wide to pack: code the distinct ones
        return unique_rows(np.stack(columns, 1))[1]
    return ((columns[0] - low[0]) * spans[1] + (columns[1] - low[1])) * spans[2] + (columns[2] - low[2])


def _start_order(thread: np.ndarray, start: np.ndarray, end: np.ndarray,
                 is_point: np.ndarray) -> np.ndarray:
    """Rows by thread, then start, then longer first, then operators before points: the order of
    ``np.lexsort((is_point, -end, start, thread))``, with two sort keys instead of four where the
    values fit one integer each."""
    if not len(start):
        return np.zeros(0, np.int64)
    low, span = start.min(), int(start.max()) - int(start.min()) + 1
    high = int(end.max())
    fits = (int(thread.max()) + 1) * span < 2**62 and (high - int(end.min()) + 1) * 2 < 2**62
    if not fits:
        return np.lexsort((is_point, -end, start, thread))
    first = thread * span + (start - low)
    second = (high - end) * 2 + is_point
    return np.lexsort((second, first))


def depths(parent: np.ndarray) -> np.ndarray:
    """Each event's number of enclosing events (0 for the outermost), from ``parent`` indices: by
    pointer doubling (each pass adds the distance to the ancestor reached and jumps twice as far),
    so that a nesting ``d`` deep takes about log2(d) passes, not ``d`` (69 ms to 38 ms for 700k
    events 20 deep)."""
    depth = (parent >= 0).astype(np.int64)
    up = parent.astype(np.int64)  # (a copy) each event's ancestor ``depth`` levels up, -1: past the top
    live = np.flatnonzero(up >= 0)
    while len(live):
        ancestor = up[live]
        depth[live] += depth[ancestor]
        up[live] = up[ancestor]
        live = live[up[live] >= 0]
    return depth
