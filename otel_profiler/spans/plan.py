"""The plan of one rank's batch: which trace each event joins, its span id and parent, which events
are individual spans and which are counted in aggregates (the rules are in ``build``'s docstring).
:func:`plan_spans` makes one frozen :class:`SpanPlan`; ``layout`` places its spans in a table."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from cuda_tracer.model.correlate import Correlation, correlate
from cuda_tracer.model.events import GPU_OP_KINDS, LAUNCH_KINDS, MISSING, EventBatch, Kind

from .budget import EventRows, keep_launch_context, select
from ..shared.ids import batch_steps, hash64, mix64, root_span_id, run_id_of, trace_id, trace_rank
from .nesting import parents_by_thread, scope_parents, thread_forests
from .options import SpanOptions

KnownStep = tuple[int, int, int]
"""``(number, start_ns, end_ns)`` of a step whose STEP event came in an earlier batch."""


@dataclass(frozen=True)
class Traces:
    """Per trace: step number (-1: window), root emitted in this batch, ids, extent."""

    numbers: np.ndarray
    emit_root: np.ndarray
    id_hi: np.ndarray
    id_lo: np.ndarray
    root_span_ids: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    window_start_ns: np.ndarray  # window traces: window start (ns); steps: -1

    def __len__(self) -> int:
        return len(self.numbers)

    @property
    def is_step(self) -> np.ndarray:
        return self.window_start_ns < 0


@dataclass(frozen=True)
class Anchors:
    """Which rows become spans, and each row's anchor: the time and thread that decide its trace and
    parent (its own for CPU events; its launch call's for linked GPU ops and syncs)."""

    correlation: Correlation
    rows: EventRows
    cpu_op_rows: np.ndarray  # CPU ops: context of launch calls (``build`` docstring)
    time_ns: np.ndarray  # per batch row
    thread: np.ndarray  # per batch row (MISSING: no thread)


@dataclass(frozen=True)
class SpanPlan:
    """What is built for one rank's batch. Arrays ending in ``_of_row`` have one entry per batch row."""

    meta: Mapping[str, Any]
    batch: EventBatch
    options: SpanOptions
    run_id: str
    rank: int
    traces: Traces
    correlation: Correlation
    device_rows: np.ndarray  # GPU ops and GPU-side syncs
    span_id_of_row: np.ndarray  # uint64, deterministic
    trace_of_row: np.ndarray  # -1: not exported (nor aggregated)
    parent_of_row: np.ndarray  # the kept row a span nests under, -1: the trace's root
    launch_of_row: np.ndarray  # the launch call of a GPU op or sync, -1: none
    individual: np.ndarray  # bool: an individual span (else counted in an aggregate)


def plan_spans(meta: Mapping[str, Any], batch: EventBatch, options: SpanOptions,
               known_steps: list[KnownStep]) -> SpanPlan:
    """The plan of one rank's batch (``build``'s docstring states every rule)."""
    rank = trace_rank(meta, batch)
    run_id = options.run_id or run_id_of(meta)
    anchors = find_anchors(batch)
    rows = anchors.rows
    # Traces: steps (this batch's, then earlier ones), then windows for the rest. CPU ops join the
    # trace their start falls in, when there is one; they make none (most of them are not exported).
    member_rows = np.concatenate([rows.annotations, rows.gpu_annotations, rows.calls, rows.device])
    traces, trace_of_member = _assign_traces(batch, options, run_id, rank, known_steps, anchors.time_ns,
                                             member_rows)
    trace_of_row = np.full(len(batch), -1, np.int64)
    trace_of_row[member_rows] = trace_of_member
    op_rows = anchors.cpu_op_rows[batch.tid[anchors.cpu_op_rows] != MISSING]
    trace_of_row[op_rows] = _existing_trace(traces, options, batch.start_ns[op_rows])
    op_rows = op_rows[trace_of_row[op_rows] >= 0]
    span_ids = _dedupe(_span_ids(batch, run_id, rank), np.concatenate([member_rows, op_rows]))

    # Parents: innermost scope (annotation or CPU op) of the anchor's thread, within the same trace.
    parent_of_row = np.full(len(batch), -1, np.int64)
    forests = thread_forests(batch, np.concatenate([rows.annotations, op_rows]))
    scope_rows, enclosing = scope_parents(forests, trace_of_row)
    parent_of_row[scope_rows] = enclosing
    cpu_members = np.concatenate([rows.calls, rows.device])
    parent_of_row[cpu_members] = parents_by_thread(forests, cpu_members, anchors.time_ns, anchors.thread,
                                                   trace_of_row)

    # Budget: units ranked by duration, costliest kept while the budget lasts; then the CPU ops
    # around the kept launch calls, in the room reserved for them. Room they did not take goes back
    # to the units (a second selection keeps a superset of the first's launches).
    room = np.minimum(np.bincount(trace_of_row[op_rows], minlength=len(traces)), options.budget // 4)
    individual = select(batch, options.budget, trace_of_row, len(traces), rows, room)
    used = keep_launch_context(batch, individual, parent_of_row, trace_of_row, rows, room)
    if (used < room).any():
        kept_ops = op_rows[individual[op_rows]]
        individual = select(batch, options.budget, trace_of_row, len(traces), rows, used)
        individual[kept_ops] = True
    trace_of_row[op_rows[~individual[op_rows]]] = -1  # not exported, not aggregated
    # A parent annotation that was aggregated hands its children to its own kept ancestor (or root).
    while True:
        lost = np.flatnonzero((parent_of_row >= 0) & ~individual[np.maximum(parent_of_row, 0)])
        if not len(lost):
            break
        parent_of_row[lost] = parent_of_row[parent_of_row[lost]]
    launch_of_row = np.full(len(batch), -1, np.int64)
    launch_of_row[rows.device] = rows.launch_of_device
    return SpanPlan(meta, batch, options, run_id, rank, traces, anchors.correlation, rows.device, span_ids,
                    trace_of_row, parent_of_row, launch_of_row, individual)


def find_anchors(batch: EventBatch) -> Anchors:
    """The rows that become spans and the anchor (time, thread) of each row."""
    kind, start = batch.kind, batch.start_ns
    correlation = correlate(batch)
    call_rows = np.flatnonzero(np.isin(kind, np.asarray(LAUNCH_KINDS, np.uint8)))
    device_rows = np.flatnonzero(np.isin(kind, np.asarray(GPU_OP_KINDS + (Kind.SYNC,), np.uint8)))
    launch_of_device = _launches(batch, correlation, device_rows, call_rows)
    anchor_time = start.copy()
    anchor_thread = np.where(np.isin(kind, np.asarray(LAUNCH_KINDS + (Kind.USER_ANNOTATION, Kind.CPU_OP),
                                                      np.uint8)), batch.tid, MISSING)
    linked = launch_of_device >= 0
    anchor_time[device_rows[linked]] = start[launch_of_device[linked]]
    anchor_thread[device_rows[linked]] = batch.tid[launch_of_device[linked]]
    rows = EventRows(annotations=np.flatnonzero(kind == Kind.USER_ANNOTATION),
                     gpu_annotations=np.flatnonzero(kind == Kind.GPU_USER_ANNOTATION),
                     calls=call_rows, device=device_rows, launch_of_device=launch_of_device)
    return Anchors(correlation, rows, np.flatnonzero(kind == Kind.CPU_OP), anchor_time, anchor_thread)


def _span_ids(batch: EventBatch, run_id: str, rank: int) -> np.ndarray:
    """Deterministic span id of every row: hashes run, rank, kind, start, end, lane, correlation."""
    lane = np.where(batch.tid != MISSING, batch.tid, batch.stream)
    seed = np.uint64(hash64(run_id, rank))
    with np.errstate(over="ignore"):
        ids = mix64(mix64(batch.start_ns.astype(np.uint64) ^ seed) + batch.end_ns.astype(np.uint64))
        ids = mix64(ids ^ (lane.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15))
                    ^ (batch.kind.astype(np.uint64) << np.uint64(56)) ^ batch.correlation.astype(np.uint64))
    ids[ids == 0] = 1
    return ids


def _assign_traces(batch: EventBatch, options: SpanOptions, run_id: str, rank: int,
                   known_steps: list[KnownStep], anchor_time: np.ndarray,
                   member_rows: np.ndarray) -> tuple[Traces, np.ndarray]:
    """Traces and the trace of each member row (by anchor time: the step containing it, else its
    window). Window trace ids include the first anchor of the window in this batch, so a window split
    over two batches becomes two traces instead of one trace with two roots."""
    in_batch = batch_steps(batch)
    numbers_in_batch = {number for number, _, _ in in_batch}
    steps = [(n, s, e, True) for n, s, e in in_batch] + \
        [(n, s, e, False) for n, s, e in known_steps if n not in numbers_in_batch]
    steps.sort(key=lambda step: step[1])
    step_numbers = np.array([step[0] for step in steps], np.int64)
    step_start = np.array([step[1] for step in steps], np.int64)
    step_end = np.array([step[2] for step in steps], np.int64)
    t = anchor_time[member_rows]
    step_index = np.searchsorted(step_start, t, side="right") - 1
    in_step = (step_index >= 0) & (t < step_end[np.maximum(step_index, 0)]) if len(steps) \
        else np.zeros(len(t), bool)
    window = np.where(in_step, -1, t // options.window_ns)
    window_keys, window_of_member = np.unique(window[~in_step], return_inverse=True)
    n_steps, n_windows = len(steps), len(window_keys)
    trace_of_member = np.empty(len(t), np.int64)
    trace_of_member[in_step] = step_index[in_step]
    trace_of_member[~in_step] = n_steps + window_of_member
    first = np.full(n_windows, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first, window_of_member, t[~in_step])
    ids = [trace_id(run_id, rank, "step", int(n)) for n in step_numbers.tolist()] + \
          [trace_id(run_id, rank, "window", f"{w}/{f}") for w, f in zip(window_keys.tolist(), first.tolist())]
    # Window extents: their members' span.
    window_start = np.full(n_windows, np.iinfo(np.int64).max, np.int64)
    window_end = np.full(n_windows, np.iinfo(np.int64).min, np.int64)
    window_rows = member_rows[~in_step]
    np.minimum.at(window_start, window_of_member, batch.start_ns[window_rows])
    np.maximum.at(window_end, window_of_member, batch.end_ns[window_rows])
    traces = Traces(
        numbers=np.r_[step_numbers, np.full(n_windows, -1)].astype(np.int64),
        emit_root=np.r_[np.array([step[3] for step in steps], bool), np.ones(n_windows, bool)],
        id_hi=np.array([hi for hi, _ in ids], np.uint64), id_lo=np.array([lo for _, lo in ids], np.uint64),
        root_span_ids=np.array([root_span_id(hi, lo) for hi, lo in ids], np.uint64),
        start_ns=np.r_[step_start, window_start].astype(np.int64),
        end_ns=np.r_[step_end, window_end].astype(np.int64),
        window_start_ns=np.r_[np.full(n_steps, -1), window_keys * options.window_ns].astype(np.int64))
    return traces, trace_of_member


def _launches(batch: EventBatch, correlation: Correlation, device_rows: np.ndarray,
              call_rows: np.ndarray) -> np.ndarray:
    """Launch call row of each device-side row (GPU op or sync), -1 if none (``build`` docstring)."""
    launch_row = np.full(len(batch), -1, np.int64)
    launch_row[correlation.gpu_rows] = correlation.launch_of_gpu
    # GPU-side sync events: the API call with the same correlation id.
    sync_rows = np.flatnonzero(batch.kind == Kind.SYNC)
    if len(sync_rows) and len(call_rows):
        call_of_correlation = {c: r for c, r in zip(batch.correlation[call_rows].tolist(), call_rows.tolist())
                               if c != MISSING}
        for r, c in zip(sync_rows.tolist(), batch.correlation[sync_rows].tolist()):
            launch_row[r] = call_of_correlation.get(c, -1) if c != MISSING else -1
    # Graph kernels with an unknown launch: the latest earlier cudaGraphLaunch of the rank.
    graph_orphans = device_rows[(launch_row[device_rows] < 0) & (batch.graph_id[device_rows] != MISSING)]
    if len(graph_orphans):
        names = batch.strings
        graph_calls = call_rows[[("GraphLaunch" in names[n]) for n in batch.name[call_rows].tolist()]] \
            if len(call_rows) else call_rows
        if len(graph_calls):
            graph_calls = graph_calls[np.argsort(batch.start_ns[graph_calls], kind="stable")]
            j = np.searchsorted(batch.start_ns[graph_calls], batch.start_ns[graph_orphans], "right") - 1
            launch_row[graph_orphans[j >= 0]] = graph_calls[j[j >= 0]]
    launches: np.ndarray = launch_row[device_rows]
    return launches


def _dedupe(ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Make ``ids[rows]`` unique by rehashing repeats with their occurrence number."""
    for attempt in range(1, 8):
        sub = ids[rows]
        ordered = np.sort(sub)
        if not (ordered[1:] == ordered[:-1]).any():
            return ids
        order = rows[np.argsort(sub, kind="stable")]
        repeat = np.zeros(len(order), bool)
        repeat[1:] = ids[order][1:] == ids[order][:-1]
        first = np.flatnonzero(~repeat)  # each id's first occurrence; the n-th repeat is n after it
        occurrence = np.arange(len(order)) - first[np.cumsum(~repeat) - 1]
        repeats = order[repeat]  # the occurrence number, not the row: the same in any piece of a batch
        ids[repeats] = mix64(ids[repeats] + np.uint64(attempt) + occurrence[repeat].astype(np.uint64))
        ids[ids == 0] = 1
    return ids


def _existing_trace(traces: Traces, options: SpanOptions, t: np.ndarray) -> np.ndarray:
    """The trace each time falls in: the step containing it, else its window if that window has a
    trace in this batch, else -1."""
    n_steps = int(traces.is_step.sum())  # step traces come first, by start time
    step_start, step_end = traces.start_ns[:n_steps], traces.end_ns[:n_steps]
    i = np.searchsorted(step_start, t, side="right") - 1
    inside = (i >= 0) & (t < step_end[np.maximum(i, 0)]) if n_steps else np.zeros(len(t), bool)
    out = np.where(inside, i, -1)
    windows = traces.window_start_ns[n_steps:]  # ascending
    if len(windows):
        outside = np.flatnonzero(out < 0)
        key = t[outside] // options.window_ns * options.window_ns
        j = np.minimum(np.searchsorted(windows, key), len(windows) - 1)
        hit = windows[j] == key
        out[outside[hit]] = n_steps + j[hit]
    return out
