"""GPU memory from the allocator's ``[memory]`` events of a trace (``profile_memory=True``).

Each event records one allocation (``Bytes`` > 0) or free (< 0) and the allocator's totals after it:
``Total Allocated`` (bytes held by tensors) and ``Total Reserved`` (bytes the caching allocator holds
from the driver). Events of the CPU (``Device Type`` 0) are kept apart, under ``host`` (key ``cpu``),
with the same figures. Per device:

- ``peak``: the largest ``Total Allocated``, when it happened, in which step, and the operator that
  made the allocation that reached it (the innermost operator enclosing that event on its thread).
- ``peak_reserved_bytes``: the largest ``Total Reserved``.
- ``steps``: per ``ProfilerStep#N`` range, the peak allocated in it, what was allocated at its end,
  and the growth from the end of the step before (memory that stays allocated step after step is
  the sign of a leak).
- ``largest_allocations``: the biggest single allocations with their time, step and operator.

Older traces record no totals: there ``baseline`` is ``"window_start"`` and allocated bytes are the
running sum of the sizes from the first event (what was allocated before the window is unknown),
reserved bytes are null; otherwise ``baseline`` is ``"absolute"``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

import numpy as np

from cuda_tracer.model.array_sets import distinct
from cuda_tracer.model.events import MISSING, EventBatch, Kind

from ..attribution.operators import operator_rows

if TYPE_CHECKING:  # (the summary's types: a span export need not import them, 10 ms)
    from ..summary_schema.sections import DeviceMemory, Memory, MemoryStep, Place

LARGEST = 10
TIMELINE_POINTS = 1500


def memory_columns(batch: EventBatch) -> tuple[np.ndarray, ...]:
    """Every ``[memory]`` event's row (ascending), device type, total allocated and reserved (read
    from the side table once: ``gpu_memory_rows`` of the GPUs and of the host take their share)."""
    rows = np.flatnonzero(batch.kind == Kind.MEMORY)
    return rows, *(batch.extra_column(key, rows) for key in ("device_type", "total_allocated", "total_reserved"))


def gpu_memory_rows(batch: EventBatch, host: bool = False, columns: tuple[np.ndarray, ...] | None = None
                    ) -> dict[str, np.ndarray]:
    """The GPU ``[memory]`` events (``host``: those of the CPU instead) in time order with their
    totals: rows, allocated, reserved, and ``relative`` (True for events whose trace records no
    totals: their allocated bytes are the running sum of ``Bytes`` on their device from the first
    event, reserved is MISSING). ``columns``: ``memory_columns(batch)``, when already read."""
    rows, dtype, allocated, reserved = columns if columns is not None else memory_columns(batch)
    mine = dtype == 0 if host else (dtype != 0) & (batch.device[rows] >= 0)
    rows, allocated, reserved = rows[mine], allocated[mine], reserved[mine]
    order = np.argsort(batch.start_ns[rows], kind="stable")
    rows, allocated, reserved = rows[order], allocated[order], reserved[order]
    relative = allocated == MISSING
    if relative.any():  # older traces: totals from the sizes, per device
        key = (batch.rank[rows].astype(np.int64) << 32) | batch.device[rows]
        for k in distinct(key[relative]).tolist():
            at = np.flatnonzero((key == k) & relative)
            allocated[at] = np.cumsum(batch.bytes[rows[at]])
    return {"rows": rows, "allocated": allocated, "reserved": reserved, "relative": relative}


def _devices(batch: EventBatch, rows: np.ndarray, multi_rank: bool, host: bool = False
             ) -> list[tuple[str, np.ndarray]]:
    """(key, positions into ``rows``) per (rank, device); the host's device is ``cpu``."""
    device = np.zeros(len(rows), np.int64) if host else batch.device[rows].astype(np.int64)
    key = (batch.rank[rows].astype(np.int64) << 32) | device
    uniq, inv = np.unique(key, return_inverse=True)
    out = []
    for i, k in enumerate(uniq.tolist()):
        rank, dev = k >> 32, "cpu" if host else k & 0xFFFFFFFF
        out.append((f"{rank}:{dev}" if multi_rank else str(dev), np.flatnonzero(inv == i)))
    return out


class _Context:
    """Finds the step and the innermost operator of single events (a few per device)."""

    def __init__(self, batch: EventBatch):
        self.batch = batch
        self.ops = operator_rows(batch)
        self.ops = self.ops[batch.kind[self.ops] != Kind.STEP]
        steps = np.flatnonzero(batch.kind == Kind.STEP)
        numbers = batch.extra("step")
        self.steps = sorted(((int(batch.rank[r]), int(batch.start_ns[r]), int(batch.end_ns[r]),
                              numbers.get(int(r), -1)) for r in steps.tolist()))
        self._thread_ops: dict[tuple[int, int, int], np.ndarray] = {}  # (rank, pid, tid): its operators

    def step_of(self, rank: int, t: int) -> int | None:
        for r, start, end, number in self.steps:
            if r == rank and start <= t <= end:
                return number
        return None

    def operator_of(self, row: int) -> str | None:
        b = self.batch
        thread = (int(b.rank[row]), int(b.pid[row]), int(b.tid[row]))
        ops = self._thread_ops.get(thread)
        if ops is None:
            ops = self.ops[(b.rank[self.ops] == thread[0]) & (b.pid[self.ops] == thread[1]) &
                           (b.tid[self.ops] == thread[2])]
            self._thread_ops[thread] = ops
        t = b.start_ns[row]
        holds = ops[(b.start_ns[ops] <= t) & (t <= b.end_ns[ops])]
        if not len(holds):
            return None
        inner = holds[np.lexsort((b.end_ns[holds] * -1, b.start_ns[holds]))[-1]]
        return b.strings[int(b.name[inner])]

    def place(self, row: int) -> Place:
        b = self.batch
        return {"time_ns": int(b.start_ns[row]), "step": self.step_of(int(b.rank[row]), int(b.start_ns[row])),
                "operator": self.operator_of(row)}


def memory(batch: EventBatch, multi_rank: bool = False, largest: int = LARGEST) -> Memory:
    """``{events, devices: {device: {baseline, events, allocations, frees, peak: {allocated_bytes,
    reserved_bytes, time_ns, step, operator}, peak_reserved_bytes, final_allocated_bytes,
    steps: [{step, peak_allocated_bytes, end_allocated_bytes, growth_bytes}],
    largest_allocations: [{bytes, time_ns, step, operator}]}}, host: {cpu: <same>}}`` (see the
    module docstring; ``host`` only when the CPU's allocator events were recorded)."""
    out: Memory = {"events": 0, "devices": {}}
    ctx = None
    columns = memory_columns(batch)
    for host in (False, True):
        m = gpu_memory_rows(batch, host, columns)
        if not len(m["rows"]):
            continue
        ctx = ctx or _Context(batch)
        figures = {key: _figures(batch, ctx, m, at, largest)
                   for key, at in _devices(batch, m["rows"], multi_rank, host)}
        if host:
            out["host"] = figures
        else:
            out["events"], out["devices"] = int(len(m["rows"])), figures
    return out


def _figures(batch: EventBatch, ctx: "_Context", m: dict[str, np.ndarray], at: np.ndarray,
             largest: int) -> DeviceMemory:
    """The figures of one device: ``at`` are its positions in ``m``'s rows."""
    alloc, reserved, r = m["allocated"][at], m["reserved"][at], m["rows"][at]
    peak = int(np.argmax(alloc))
    sizes = batch.bytes[r]
    big = np.argsort(-sizes, kind="stable")[:largest]
    relative = bool(m["relative"][at].all())
    return {
        "baseline": "window_start" if relative else "absolute",
        "events": int(len(at)), "allocations": int((sizes > 0).sum()), "frees": int((sizes < 0).sum()),
        "peak": {"allocated_bytes": int(alloc[peak]),
                 "reserved_bytes": None if relative else int(reserved[peak]),
                 **ctx.place(int(r[peak]))},
        "peak_reserved_bytes": None if relative else int(reserved.max()),
        "final_allocated_bytes": int(alloc[-1]),
        "steps": _steps(batch, ctx, r, alloc),
        "largest_allocations": [{"bytes": int(sizes[i]), **ctx.place(int(r[i]))}
                                for i in big.tolist() if sizes[i] > 0],
    }


def _steps(batch: EventBatch, ctx: _Context, rows: np.ndarray, alloc: np.ndarray) -> list[MemoryStep]:
    rank = int(batch.rank[rows[0]])
    t = batch.start_ns[rows]
    out: list[MemoryStep] = []
    before: int | None = None
    for r, start, end, number in ctx.steps:
        if r != rank:
            continue
        lo, hi = np.searchsorted(t, start, "left"), np.searchsorted(t, end, "right")
        end_alloc = int(alloc[hi - 1]) if hi > 0 else None
        out.append({"step": number, "peak_allocated_bytes": int(alloc[lo:hi].max()) if hi > lo else None,
                    "end_allocated_bytes": end_alloc,
                    "growth_bytes": end_alloc - before if end_alloc is not None and before is not None
                    else None})
        before = end_alloc
    return out


class StepPeak(TypedDict):
    rank: int
    device: int
    step: int | None
    allocated_bytes: int
    reserved_bytes: int


def step_peaks(batch: EventBatch) -> list[StepPeak]:
    """Per (rank, device) and step, in step order: ``{rank, device, step, allocated_bytes,
    reserved_bytes}``, the largest totals of the GPU ``[memory]`` events inside the step (reserved
    None where the trace records no totals; ``step`` None for a batch without steps, over all its
    events). Traces without totals give no absolute figure and are left out."""
    m = gpu_memory_rows(batch)
    keep = ~m["relative"]
    rows, alloc, reserved = m["rows"][keep], m["allocated"][keep], m["reserved"][keep]
    if not len(rows):
        return []
    numbers = batch.extra("step")
    step_rows = np.flatnonzero(batch.kind == Kind.STEP)
    step_rows = step_rows[np.argsort(batch.start_ns[step_rows], kind="stable")]
    out: list[StepPeak] = []
    for key, at in _devices(batch, rows, True):
        rank, device = (int(x) for x in key.split(":"))
        t = batch.start_ns[rows[at]]
        mine = step_rows[batch.rank[step_rows] == rank]
        ranges = [(numbers.get(int(r)), int(batch.start_ns[r]), int(batch.end_ns[r])) for r in mine.tolist()] \
            or [(None, int(t[0]), int(t[-1]))]
        for number, start, end in ranges:
            lo, hi = np.searchsorted(t, start, "left"), np.searchsorted(t, end, "right")
            if hi > lo:
                out.append({"rank": rank, "device": device, "step": number,
                            "allocated_bytes": int(alloc[at][lo:hi].max()),
                            "reserved_bytes": int(reserved[at][lo:hi].max())})
    return out


def memory_timeline(batch: EventBatch, multi_rank: bool = False, points: int = TIMELINE_POINTS
                    ) -> dict[str, dict]:
    """Per device the allocated and reserved bytes over time for a chart: ``{t_us, allocated,
    reserved}`` (µs from the first event of the batch), at most ``points`` buckets, each holding its
    largest values so no peak is lost."""
    m = gpu_memory_rows(batch)
    rows = m["rows"]
    out: dict[str, dict] = {}
    if not len(rows):
        return out
    t0 = int(batch.start_ns.min())
    for key, at in _devices(batch, rows, multi_rank):
        t = batch.start_ns[rows[at]] - t0
        alloc, reserved = m["allocated"][at], m["reserved"][at]
        if len(t) > points:
            edges = np.linspace(t[0], t[-1] + 1, points + 1)
            starts = distinct(np.searchsorted(t, edges[:-1]))
            starts = starts[starts < len(t)]
            t, alloc, reserved = (t[starts], np.maximum.reduceat(alloc, starts),
                                  np.maximum.reduceat(reserved, starts))
        out[key] = {"t_us": (t / 1e3).tolist(), "allocated": alloc.tolist(),
                    "reserved": None if m["relative"][at].all() else reserved.tolist()}
    return out
