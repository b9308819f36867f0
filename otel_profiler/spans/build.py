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
  and the costliest are kept as individual spans while the budget lasts. Every other event is
  counted in an *aggregate span* per (trace, kind, name): its name is the kernel/call name (so
  Jaeger's operation search finds every kernel that ran in a step), with
  ``otel_profiler.aggregate.count`` and ``otel_profiler.aggregate.duration_ns``.
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
``otel_profiler.*`` (profiler bookkeeping), all listed in ``attributes.ATTRIBUTES``, the list
they are set from.

The code: ``plan`` decides traces, ids, parents and the budget (one frozen ``SpanPlan``), ``layout``
places roots, individual spans and aggregates, ``attributes`` fills their columns.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from cuda_tracer.model.events import EventBatch, Kind

from .attributes import emit_attributes, resource_attributes, version
from .context import join_context
from .layout import SpanLayout, aggregate_span_ids, lay_out
from .options import SpanOptions
from .plan import KnownStep, find_anchors, plan_spans
from .table import SpanTable

def build_spans(meta: Mapping[str, Any], batch: EventBatch, options: SpanOptions | None = None,
                known_steps: list[KnownStep] | None = None) -> SpanTable:
    """The spans of one rank's batch (see the module docstring for every rule).

    ``known_steps``: ``(number, start_ns, end_ns)`` of steps whose STEP event came in an earlier batch
    of this rank (``batch_steps``), so late GPU events still join their step's trace; their root
    span is not emitted again (its id is deterministic).
    """
    plan = plan_spans(meta, batch, options or SpanOptions(), known_steps or [])
    table = _table(lay_out(plan))
    return join_context(table, meta, batch, plan.run_id, plan.rank)


def split_open_tail(batch: EventBatch, closed_until_ns: int, max_hold_ns: int,
                    max_hold_rows: int) -> tuple[EventBatch, EventBatch]:
    """``(ready, held)``: rows anchored at or after ``closed_until_ns`` (the end of the last step
    seen) may still belong to a step whose STEP event has not arrived yet, so they are held for the
    next batch, unless they are older than ``max_hold_ns`` before the newest event or more than
    ``max_hold_rows`` would be held. STEP events are always ready."""
    if not len(batch):
        return batch, batch
    anchor = find_anchors(batch).time_ns
    newest = int(batch.end_ns.max())
    hold = (anchor >= closed_until_ns) & (anchor >= newest - max_hold_ns) & (batch.kind != Kind.STEP)
    if not hold.any() or hold.sum() > max_hold_rows:
        return batch, batch.take(np.zeros(0, np.int64))
    return batch.take(~hold), batch.take(hold)


def _table(layout: SpanLayout) -> SpanTable:
    """The span table of a layout: ids, parents, links, names, times and attributes."""
    plan, batch, traces, aggregates = layout.plan, layout.batch, layout.traces, layout.aggregates
    roots, events = layout.root_traces, layout.event_rows
    span_ids = plan.span_id_of_row
    no_ids = np.zeros(len(roots), np.uint64)
    # Parents: a kept scope or the trace's root; link: the launch call when it is an individual span.
    parent_row = plan.parent_of_row[events]
    parent = np.where(parent_row >= 0, span_ids[np.maximum(parent_row, 0)],
                      traces.root_span_ids[plan.trace_of_row[events]])
    launch_row = plan.launch_of_row[events]
    launch_kept = (launch_row >= 0) & plan.individual[np.maximum(launch_row, 0)]
    link = np.where(launch_kept, span_ids[np.maximum(launch_row, 0)], 0).astype(np.uint64)
    span_trace = np.concatenate([roots, plan.trace_of_row[events], aggregates.trace])
    columns = emit_attributes(layout)
    return SpanTable(
        resource=resource_attributes(plan.meta, plan.options, plan.run_id, plan.rank), names=layout.names,
        trace_hi=traces.id_hi[span_trace], trace_lo=traces.id_lo[span_trace],
        span_id=np.concatenate([traces.root_span_ids[roots], span_ids[events],
                                aggregate_span_ids(traces, aggregates, batch.strings)]).astype(np.uint64),
        parent_id=np.concatenate([no_ids, parent, traces.root_span_ids[aggregates.trace]]).astype(np.uint64),
        link_id=np.concatenate([no_ids, link, np.zeros(len(aggregates), np.uint64)]),
        name=layout.name,
        start_ns=np.concatenate([traces.start_ns[roots], batch.start_ns[events], aggregates.start_ns]),
        end_ns=np.concatenate([traces.end_ns[roots], batch.end_ns[events], aggregates.end_ns]),
        attrs=columns.attrs, values=columns.values,
        source_row=np.concatenate([np.full(len(roots), -1), events, np.full(len(aggregates), -1)]).astype(np.int64),
        scope_version=version())
