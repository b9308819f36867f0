"""EventBatch → spans: trace ids, span ids, parents, links, attributes and the per-trace span budget.

The result is a columnar :class:`SpanTable` (numpy columns, no object per span) that
``otel_profiler.export.otlp`` encodes. Imports no OpenTelemetry package.

Model (one rank's batch at a time; every rule is stated here, next to its code):

- **Traces.** One trace per profiled training step (a ``STEP`` event): root span ``train.step``
  covering the step's CPU time, attribute ``otel_profiler.step``. Events outside every step go into
  *window traces*: fixed, epoch-aligned windows of ``window_ns`` (root span ``otel_profiler.window``).
- **Ids.** Deterministic, so every rank's data of a step can be found and re-exports are stable:
  ``trace_id = blake2b(run_id, "step", step)[:12] ++ rank (4 bytes, big-endian)``; i.e. the first 24
  hex digits are the same for every rank of a step, the last 8 are the rank in hex. Root span ids
  derive from the trace id; other span ids hash (run, rank, kind, start, end, lane, correlation).
  Window trace ids also hash the window's first event in the batch, so a window split over two
  batches gives two traces, never one trace with two roots.
- **Across batches.** A live run flushes batches while steps run. ``known_steps`` (the exporter
  remembers the last 256 steps per rank) lets GPU events of a later batch join the trace of a step
  whose ``STEP`` event came earlier: same trace id, parent = that step's root span id. The other way
  round (annotations flushed before their step ends), the exporter holds back events after the last
  finished step (``split_open_tail``) until the step arrives, at most 5 minutes of event time.
- **Which trace.** CPU events (annotations, runtime/driver calls) by their start time; GPU ops and
  GPU-side sync events by the start time of the call that launched them (CUPTI correlation id), or
  their own start when they have none. Kernels run by a CUDA graph whose correlation is unknown are
  attributed to the latest earlier ``cudaGraphLaunch`` of the rank (``gpu.graph.id`` is kept).
- **Parents.** User annotations and CPU ops (when captured) nest by time containment on their
  thread. A runtime/driver call's parent is the innermost of them on its thread containing its
  start, else the trace's root. A GPU op gets the parent of its launch call and a span link to the
  launch span.
- **Span budget** (``OTEL_PROFILER_SPAN_BUDGET``, default 2000 per trace and batch). The root is
  always a span, and so are the longest ``budget // 2`` annotations of the trace (the children of an
  aggregated annotation move up to its nearest kept ancestor). Each GPU op (with its launch call)
  and each call without GPU work is a *unit*; units are ranked by duration (GPU time for GPU ops)
  and the costliest are kept as individual spans while the budget lasts. Every other event is counted in an *aggregate span* per (trace, kind, name): its
  name is the kernel/call name (so Jaeger's operation search finds every kernel that ran in a step),
  with ``otel_profiler.aggregate.count`` and ``otel_profiler.aggregate.duration_ns``.
  Room for the aggregates is reserved up front, so a trace stays within the budget unless the
  distinct names alone exceed what the annotations leave. The root span records the budget and the
  outcome (``otel_profiler.span_budget``, ``otel_profiler.spans.individual``,
  ``otel_profiler.spans.aggregated_events``, ``otel_profiler.span_selection``).
- **Joined traces** (``context``): with a parent's ``TRACEPARENT`` every root links to the rank's run
  span (``otel_profiler.run``, in the parent's trace), and a step root links to the job's own span
  that was current as the step began.
- **CPU ops** are the host-side context of GPU work, not units of their own: the ops enclosing a
  launch call that is a span become spans too (the whole chain, ``aten::linear`` → ``aten::addmm`` →
  ``cudaLaunchKernel``), the chains of the costliest GPU work first, at most ``budget // 4`` per
  trace (reserved up front). Other CPU ops are not exported (the summary and the report count them
  all); their children move up to the nearest exported scope.

Attribute names: semantic conventions where they exist (``thread.id``, ``service.name``,
``host.name``, ``process.pid``), else the project namespaces ``gpu.*`` (GPU facts) and
``otel_profiler.*`` (profiler bookkeeping), listed in ``attributes.ATTRIBUTES``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cuda_tracer.model.correlate import correlate
from cuda_tracer.model.events import GPU_OP_KINDS, LAUNCH_KINDS, MISSING, EventBatch, Kind

from ..names import demangled
from .attributes import (KIND_NAMES, AttrColumn, Columns, event_attributes, figure_attributes, resource_attributes,
                         root_attributes, version)
from .budget import keep_launch_context, select
from .context import join_context
from .ids import batch_steps, hash64, mix64, root_span_id, run_id_of, trace_id, trace_rank
from .nesting import parents_by_thread, scope_parents, thread_forests
from .options import SpanOptions

SPAN_KIND_INTERNAL = 1
SCOPE_NAME = "otel_profiler"

@dataclass
class SpanTable:
    """Spans as columns. Ids are uint64 (a trace id is ``trace_hi`` ++ ``trace_lo``); 0 means none."""

    resource: dict[str, Any]
    names: list[str]
    trace_hi: np.ndarray
    trace_lo: np.ndarray
    span_id: np.ndarray
    parent_id: np.ndarray
    link_id: np.ndarray  # a link to a span of the same trace (the launch call), 0: no link
    name: np.ndarray  # index into names
    start_ns: np.ndarray
    end_ns: np.ndarray
    attrs: list[AttrColumn]
    values: list[Any]
    source_row: np.ndarray  # batch row of the event (-1: root or aggregate); not exported
    scope_name: str = SCOPE_NAME
    scope_version: str = ""
    extra_links: list[Any] = field(default_factory=list)  # context.LinkColumn: links to other traces
    trace_states: dict[int, str] = field(default_factory=dict)  # span row -> W3C trace state

    def __len__(self) -> int:
        return len(self.span_id)

    def attr(self, key: str) -> AttrColumn:
        for a in self.attrs:
            if a.key == key:
                return a
        raise KeyError(key)

    def trace_hex(self, i: int) -> str:
        return f"{int(self.trace_hi[i]):016x}{int(self.trace_lo[i]):016x}"


# ----------------------------------------------------------------------------------- hashing
def _group_first(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(unique_keys, inverse)`` of an int64 key array."""
    return np.unique(keys, return_inverse=True)


@dataclass
class _Traces:
    """Per trace: step number (-1: window), root emitted in this batch, ids, extent."""

    numbers: np.ndarray
    emit: np.ndarray
    hi: np.ndarray
    lo: np.ndarray
    root_ids: np.ndarray
    start: np.ndarray
    end: np.ndarray
    window_start: np.ndarray  # window traces: window start (ns); steps: -1

    @property
    def is_step(self) -> np.ndarray:
        return self.window_start < 0


def build_spans(meta: dict[str, Any], batch: EventBatch, options: SpanOptions | None = None,
                known_steps: list[tuple[int, int, int]] | None = None) -> SpanTable:
    """The spans of one rank's batch (see the module docstring for every rule).

    ``known_steps``: ``(number, start_ns, end_ns)`` of steps whose STEP event came in an earlier batch
    of this rank (``batch_steps``), so late GPU events still join their step's trace; their root
    span is not emitted again (its id is deterministic).
    """
    opt = options or SpanOptions()
    rank = trace_rank(meta, batch)
    run_id = opt.run_id or run_id_of(meta)
    kind = batch.kind
    start, end = batch.start_ns, batch.end_ns
    a = _anchors(batch)
    corr, annot_rows, gpu_annot_rows, call_rows, dev_rows = a.corr, a.annot_rows, a.gpu_annot_rows, \
        a.call_rows, a.dev_rows
    launch_of, anchor_t, anchor_tid, op_rows = a.launch_of, a.time, a.tid, a.op_rows

    # --- traces: steps (this batch's, then earlier ones), then windows for the rest. CPU ops join the
    # trace their start falls in, when there is one; they make none (most of them are not exported).
    traces, trace_of, member_rows = _assign_traces(batch, opt, run_id, rank, known_steps or [], anchor_t,
                                                   np.concatenate([annot_rows, gpu_annot_rows, call_rows,
                                                                   dev_rows]))
    n_traces = len(traces.numbers)
    trace_row = np.full(len(batch), -1, np.int64)
    trace_row[member_rows] = trace_of
    op_rows = op_rows[batch.tid[op_rows] != MISSING]
    trace_row[op_rows] = _existing_trace(traces, opt, start[op_rows])
    op_rows = op_rows[trace_row[op_rows] >= 0]

    # --- span ids of events (deterministic)
    lane = np.where(batch.tid != MISSING, batch.tid, batch.stream)
    seed = np.uint64(hash64(run_id, rank))
    with np.errstate(over="ignore"):
        ids = mix64(mix64(start.astype(np.uint64) ^ seed) + end.astype(np.uint64))
        ids = mix64(ids ^ (lane.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15))
                        ^ (kind.astype(np.uint64) << np.uint64(56)) ^ batch.correlation.astype(np.uint64))
    ids[ids == 0] = 1
    ids = _dedupe(ids, np.concatenate([member_rows, op_rows]))

    # --- parents: innermost scope (annotation or CPU op) of the anchor's thread, within the same trace
    parent_row = np.full(len(batch), -1, np.int64)
    forests = thread_forests(batch, np.concatenate([annot_rows, op_rows]))
    scope_rows, enclosing = scope_parents(forests, trace_row)
    parent_row[scope_rows] = enclosing
    cpu_members = np.concatenate([call_rows, dev_rows])
    parent_row[cpu_members] = parents_by_thread(forests, cpu_members, anchor_t, anchor_tid, trace_row)

    # --- budget: units ranked by duration, costliest kept while the budget lasts; then the CPU ops
    # around the kept launch calls, in the room reserved for them. Room they did not take goes back
    # to the units (a second selection keeps a superset of the first's launches).
    room = np.minimum(np.bincount(trace_row[op_rows], minlength=n_traces), opt.budget // 4)
    keep = select(batch, opt.budget, trace_row, n_traces, annot_rows, gpu_annot_rows, call_rows,
                   dev_rows, launch_of, room)
    used = keep_launch_context(batch, keep, parent_row, trace_row, call_rows, dev_rows, launch_of, room)
    if (used < room).any():
        kept_ops = op_rows[keep[op_rows]]
        keep = select(batch, opt.budget, trace_row, n_traces, annot_rows, gpu_annot_rows, call_rows,
                       dev_rows, launch_of, used)
        keep[kept_ops] = True
    trace_row[op_rows[~keep[op_rows]]] = -1  # not exported, not aggregated
    # A parent annotation that was aggregated hands its children to its own kept ancestor (or root).
    while True:
        lost = np.flatnonzero((parent_row >= 0) & ~keep[np.maximum(parent_row, 0)])
        if not len(lost):
            break
        parent_row[lost] = parent_row[parent_row[lost]]
    table = _assemble(meta, batch, opt, run_id, rank, traces, ids, trace_row, parent_row, keep, launch_of,
                      dev_rows, corr)
    return join_context(table, meta, batch, run_id, rank)


@dataclass
class _Anchors:
    """Which rows become spans, and each row's anchor: the time and thread that decide its trace and
    parent (its own for CPU events; its launch call's for linked GPU ops and syncs)."""

    corr: Any
    annot_rows: np.ndarray
    gpu_annot_rows: np.ndarray
    op_rows: np.ndarray  # CPU ops: context of launch calls (module docstring)
    call_rows: np.ndarray
    dev_rows: np.ndarray
    launch_of: np.ndarray  # per dev row: launch call row or -1
    time: np.ndarray  # per batch row
    tid: np.ndarray  # per batch row (MISSING: no thread)


def _anchors(batch: EventBatch) -> _Anchors:
    kind, start = batch.kind, batch.start_ns
    corr = correlate(batch)
    call_rows = np.flatnonzero(np.isin(kind, np.asarray(LAUNCH_KINDS, np.uint8)))
    dev_rows = np.flatnonzero(np.isin(kind, np.asarray(GPU_OP_KINDS + (Kind.SYNC,), np.uint8)))
    launch_of = _launches(batch, corr, dev_rows, call_rows)
    anchor_t = start.copy()
    anchor_tid = np.where(np.isin(kind, np.asarray(LAUNCH_KINDS + (Kind.USER_ANNOTATION, Kind.CPU_OP),
                                                   np.uint8)), batch.tid, MISSING)
    linked = launch_of >= 0
    anchor_t[dev_rows[linked]] = start[launch_of[linked]]
    anchor_tid[dev_rows[linked]] = batch.tid[launch_of[linked]]
    return _Anchors(corr, np.flatnonzero(kind == Kind.USER_ANNOTATION),
                    np.flatnonzero(kind == Kind.GPU_USER_ANNOTATION), np.flatnonzero(kind == Kind.CPU_OP),
                    call_rows, dev_rows, launch_of, anchor_t, anchor_tid)


def split_open_tail(batch: EventBatch, closed_until_ns: int, max_hold_ns: int,
                    max_hold_rows: int) -> tuple[EventBatch, EventBatch]:
    """``(ready, held)``: rows anchored at or after ``closed_until_ns`` (the end of the last step
    seen) may still belong to a step whose STEP event has not arrived yet, so they are held for the
    next batch, unless they are older than ``max_hold_ns`` before the newest event or more than
    ``max_hold_rows`` would be held. STEP events are always ready."""
    if not len(batch):
        return batch, batch
    anchor = _anchors(batch).time
    newest = int(batch.end_ns.max())
    hold = (anchor >= closed_until_ns) & (anchor >= newest - max_hold_ns) & (batch.kind != Kind.STEP)
    if not hold.any() or hold.sum() > max_hold_rows:
        return batch, batch.take(np.zeros(0, np.int64))
    return batch.take(~hold), batch.take(hold)


def _assign_traces(batch: EventBatch, opt: SpanOptions, run_id: str, rank: int,
                   known_steps: list[tuple[int, int, int]], anchor_t: np.ndarray,
                   member_rows: np.ndarray) -> tuple[_Traces, np.ndarray, np.ndarray]:
    """Traces and the trace of each member row (by anchor time: the step containing it, else its
    window). Window trace ids include the first anchor of the window in this batch, so a window split
    over two batches becomes two traces instead of one trace with two roots."""
    steps = batch_steps(batch)
    in_batch = {n for n, _, _ in steps}
    steps = [(n, s, e, True) for n, s, e in steps] + \
        [(n, s, e, False) for n, s, e in known_steps if n not in in_batch]
    steps.sort(key=lambda x: x[1])
    s_num = np.array([x[0] for x in steps], np.int64)
    s_start = np.array([x[1] for x in steps], np.int64)
    s_end = np.array([x[2] for x in steps], np.int64)
    t = anchor_t[member_rows]
    s_idx = np.searchsorted(s_start, t, side="right") - 1
    in_step = (s_idx >= 0) & (t < s_end[np.maximum(s_idx, 0)]) if len(steps) else np.zeros(len(t), bool)
    window = np.where(in_step, -1, t // opt.window_ns)
    win_keys, win_inv = np.unique(window[~in_step], return_inverse=True)
    n_steps, n_win = len(steps), len(win_keys)
    trace_of = np.empty(len(t), np.int64)
    trace_of[in_step] = s_idx[in_step]
    trace_of[~in_step] = n_steps + win_inv
    first = np.full(n_win, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first, win_inv, t[~in_step])
    ids = [trace_id(run_id, rank, "step", int(n)) for n in s_num.tolist()] + \
          [trace_id(run_id, rank, "window", f"{w}/{f}") for w, f in zip(win_keys.tolist(), first.tolist())]
    # Window extents: their members' span.
    w_start = np.full(n_win, np.iinfo(np.int64).max, np.int64)
    w_end = np.full(n_win, np.iinfo(np.int64).min, np.int64)
    rows = member_rows[~in_step]
    np.minimum.at(w_start, win_inv, batch.start_ns[rows])
    np.maximum.at(w_end, win_inv, batch.end_ns[rows])
    traces = _Traces(
        numbers=np.r_[s_num, np.full(n_win, -1)].astype(np.int64),
        emit=np.r_[np.array([x[3] for x in steps], bool), np.ones(n_win, bool)],
        hi=np.array([h for h, _ in ids], np.uint64), lo=np.array([lo for _, lo in ids], np.uint64),
        root_ids=np.array([root_span_id(h, lo) for h, lo in ids], np.uint64),
        start=np.r_[s_start, w_start].astype(np.int64), end=np.r_[s_end, w_end].astype(np.int64),
        window_start=np.r_[np.full(n_steps, -1), win_keys * opt.window_ns].astype(np.int64))
    return traces, trace_of, member_rows


def _launches(batch: EventBatch, corr, dev_rows: np.ndarray, call_rows: np.ndarray) -> np.ndarray:
    """Launch call row of each device-side row (GPU op or sync), -1 if none (see module docstring)."""
    launch_row = np.full(len(batch), -1, np.int64)
    launch_row[corr.gpu_rows] = corr.launch_of_gpu
    # GPU-side sync events: the API call with the same correlation id.
    sync_rows = np.flatnonzero(batch.kind == Kind.SYNC)
    if len(sync_rows) and len(call_rows):
        by_corr = {c: r for c, r in zip(batch.correlation[call_rows].tolist(), call_rows.tolist())
                   if c != MISSING}
        for r, c in zip(sync_rows.tolist(), batch.correlation[sync_rows].tolist()):
            launch_row[r] = by_corr.get(c, -1) if c != MISSING else -1
    # Graph kernels with an unknown launch: the latest earlier cudaGraphLaunch of the rank.
    graph_orphans = dev_rows[(launch_row[dev_rows] < 0) & (batch.graph_id[dev_rows] != MISSING)]
    if len(graph_orphans):
        names = batch.strings
        graph_calls = call_rows[[("GraphLaunch" in names[n]) for n in batch.name[call_rows].tolist()]] \
            if len(call_rows) else call_rows
        if len(graph_calls):
            graph_calls = graph_calls[np.argsort(batch.start_ns[graph_calls], kind="stable")]
            j = np.searchsorted(batch.start_ns[graph_calls], batch.start_ns[graph_orphans], "right") - 1
            launch_row[graph_orphans[j >= 0]] = graph_calls[j[j >= 0]]
    return launch_row[dev_rows]


def _dedupe(ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Make ``ids[rows]`` unique by rehashing repeats with their occurrence number."""
    for attempt in range(1, 8):
        sub = ids[rows]
        s = np.sort(sub)
        if not (s[1:] == s[:-1]).any():
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


def _existing_trace(traces: _Traces, opt: SpanOptions, t: np.ndarray) -> np.ndarray:
    """The trace each time falls in: the step containing it, else its window if that window has a
    trace in this batch, else -1."""
    n_steps = int(traces.is_step.sum())  # step traces come first, by start time
    s_start, s_end = traces.start[:n_steps], traces.end[:n_steps]
    i = np.searchsorted(s_start, t, side="right") - 1
    out = np.where((i >= 0) & (t < s_end[np.maximum(i, 0)]) if n_steps else np.zeros(len(t), bool), i, -1)
    windows = traces.window_start[n_steps:]  # ascending
    if len(windows):
        outside = np.flatnonzero(out < 0)
        key = t[outside] // opt.window_ns * opt.window_ns
        j = np.minimum(np.searchsorted(windows, key), len(windows) - 1)
        hit = windows[j] == key
        out[outside[hit]] = n_steps + j[hit]
    return out


def _assemble(meta, batch, opt, run_id, rank, traces: _Traces, ids, trace_row, parent_row, keep, launch_of,
              dev_rows, corr) -> SpanTable:
    """Lay out roots, individual spans and aggregates as one SpanTable with its attributes."""
    kind, names_tab = batch.kind, batch.strings
    ev = np.flatnonzero(keep & (trace_row >= 0))
    agg_src = np.flatnonzero(~keep & (trace_row >= 0))
    # Aggregates per (trace, kind, name).
    akey = (trace_row[agg_src] << 40) | (kind[agg_src].astype(np.int64) << 32) | \
        batch.name[agg_src].astype(np.int64)
    agg_keys, agg_inv = _group_first(akey)
    n_agg = len(agg_keys)
    dur = batch.duration_ns
    a_trace = (agg_keys >> 40).astype(np.int64)
    a_kind = ((agg_keys >> 32) & 0xFF).astype(np.int64)
    a_name = (agg_keys & 0xFFFFFFFF).astype(np.int64)
    a_count = np.bincount(agg_inv, minlength=n_agg).astype(np.int64)
    a_total = np.bincount(agg_inv, weights=dur[agg_src], minlength=n_agg).astype(np.int64)
    a_max = np.zeros(n_agg, np.int64)
    np.maximum.at(a_max, agg_inv, dur[agg_src])
    a_start = np.full(n_agg, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(a_start, agg_inv, batch.start_ns[agg_src])
    a_end = np.zeros(n_agg, np.int64)
    np.maximum.at(a_end, agg_inv, batch.end_ns[agg_src])

    # Roots (only of traces whose root belongs to this batch): step event or window extent.
    roots = np.flatnonzero(traces.emit)
    n_root, n_ev = len(roots), len(ev)
    n = n_root + n_ev + n_agg
    readable = demangled(names_tab)  # span names as a person reads them; ids hash the raw names
    names = readable + ["train.step", "otel_profiler.window"]
    root_name = np.where(traces.is_step[roots], len(names_tab), len(names_tab) + 1)
    span_trace = np.concatenate([roots, trace_row[ev], a_trace])
    span_id = np.concatenate([traces.root_ids[roots], ids[ev],
                              _agg_ids(traces.hi, traces.lo, a_trace, a_kind, a_name, names_tab)])
    # Parents: annotation or root; link: the launch call when it is an individual span.
    p_row = parent_row[ev]
    parent = np.where(p_row >= 0, ids[np.maximum(p_row, 0)], traces.root_ids[trace_row[ev]])
    launch_row = np.full(len(batch), -1, np.int64)
    launch_row[dev_rows] = launch_of
    l_row = launch_row[ev]
    link = np.where((l_row >= 0) & keep[np.maximum(l_row, 0)], ids[np.maximum(l_row, 0)], 0).astype(np.uint64)
    parent_id = np.concatenate([np.zeros(n_root, np.uint64), parent, traces.root_ids[a_trace]]).astype(np.uint64)
    link_id = np.concatenate([np.zeros(n_root, np.uint64), link, np.zeros(n_agg, np.uint64)])
    name = np.concatenate([root_name, batch.name[ev], a_name]).astype(np.int64)
    start = np.concatenate([traces.start[roots], batch.start_ns[ev], a_start])
    end = np.concatenate([traces.end[roots], batch.end_ns[ev], a_end])

    cols = Columns(n)
    ev_span = np.arange(n_root, n_root + n_ev)
    agg_span = np.arange(n_root + n_ev, n)
    kind_vals = np.array([cols.value_id(KIND_NAMES.get(Kind(k), "other")) for k in range(1, max(Kind) + 1)],
                         np.int64)
    span_kind = np.concatenate([np.full(n_root, Kind.STEP), kind[ev], a_kind]).astype(np.int64)
    kind_ids = kind_vals[span_kind - 1]
    kind_ids[:n_root][~traces.is_step[roots]] = cols.value_id("window")
    cols.add("otel_profiler.kind", "value", np.arange(n), kind_ids)
    root_attributes(cols, batch, opt, run_id, rank, traces, roots, trace_row, keep, a_trace, a_count, dev_rows)
    figure_attributes(cols, batch, corr, opt, traces, roots, trace_row)
    event_attributes(cols, batch, ev, ev_span, launch_row, corr)
    cols.add("otel_profiler.aggregated", "bool", agg_span, np.ones(n_agg, bool))
    cols.add("otel_profiler.aggregate.count", "int", agg_span, a_count)
    cols.add("otel_profiler.aggregate.duration_ns", "int", agg_span, a_total)
    cols.add("otel_profiler.aggregate.max_duration_ns", "int", agg_span, a_max)
    # Aggregated copies and memsets keep their summed bytes.
    a_bytes = np.bincount(agg_inv, weights=np.maximum(batch.bytes[agg_src], 0), minlength=n_agg).astype(np.int64)
    mem = np.isin(a_kind, [Kind.MEMCPY, Kind.MEMSET])
    cols.add("gpu.memory.bytes", "int", agg_span[mem], a_bytes[mem])
    # Demangled names keep the name the trace recorded.
    renamed = np.array([r != t for r, t in zip(readable, names_tab)] + [False, False])
    raw = np.flatnonzero(renamed[name])
    cols.add_values("otel_profiler.raw_name", raw, [names_tab[int(name[i])] for i in raw])

    source_row = np.concatenate([np.full(n_root, -1), ev, np.full(n_agg, -1)]).astype(np.int64)
    return SpanTable(
        resource=resource_attributes(meta, opt, run_id, rank), names=names,
        trace_hi=traces.hi[span_trace], trace_lo=traces.lo[span_trace], span_id=span_id.astype(np.uint64),
        parent_id=parent_id, link_id=link_id, name=name, start_ns=start, end_ns=end,
        attrs=cols.attrs, values=cols.values, source_row=source_row,
        scope_version=version())


def _agg_ids(t_hi, t_lo, a_trace, a_kind, a_name, names_tab) -> np.ndarray:
    name_hash = np.array([hash64(s) for s in names_tab] or [0], np.uint64)
    with np.errstate(over="ignore"):
        x = mix64(t_hi[a_trace] ^ mix64(t_lo[a_trace]) ^ name_hash[a_name]
                      ^ (a_kind.astype(np.uint64) << np.uint64(56)))
    x[x == 0] = 1
    return x
