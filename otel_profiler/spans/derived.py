"""The span attributes that are derived rather than copied from one EventBatch column: each function
sets one attribute (named by its catalogue entry, ``attributes.ATTRIBUTES``) on the spans of a
``layout.SpanLayout``. Bookkeeping of roots and aggregates, launch delay and latency, kernel class,
copy bandwidth, copy and sync kinds, top kernels and operators."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from cuda_tracer.model.array_sets import distinct
from cuda_tracer.model.events import GPU_OP_KINDS, Kind, MemcpyKind, SyncKind

from ..analysis.breakdown import KERNEL_CLASSES, classify
from ..analysis.flops.result import meta_device_names, mfu as mfu_of, peak_of
from ..names import demangle, torch_range
from .columns import KIND_NAMES, Columns
from .layout import SpanLayout

Derivation = Callable[[str, SpanLayout, Columns], None]
"""Sets attribute ``key`` on some spans of the layout."""

_BLOCKING_CALL = re.compile(r"Synchronize")


def _event_spans_of(layout: SpanLayout, kinds: tuple[Kind, ...]) -> np.ndarray:
    """Positions (within the individual spans) of the events of ``kinds``."""
    return np.flatnonzero(np.isin(layout.batch.kind[layout.event_rows], np.asarray(kinds, np.uint8)))


# ----------------------------------------------------------------------------------------- every span
def span_kind(key: str, layout: SpanLayout, columns: Columns) -> None:
    kind_values = np.array([columns.value_id(KIND_NAMES.get(Kind(k), "other")) for k in range(1, max(Kind) + 1)],
                           np.int64)
    value_ids = kind_values[layout.span_kind - 1]
    value_ids[:len(layout.root_traces)][~layout.root_is_step] = columns.value_id("window")
    strings = layout.batch.strings  # torch's own ranges are recorded as annotations are: not the user's
    torchs = np.fromiter((torch_range(s) is not None for s in strings), bool, len(strings))
    names = layout.name
    annotation = np.flatnonzero(layout.span_kind == Kind.USER_ANNOTATION)
    annotation = annotation[names[annotation] < len(strings)]
    value_ids[annotation[torchs[names[annotation]]]] = columns.value_id("torch_range")
    columns.add(key, "value", np.arange(len(layout)), value_ids)


def raw_name(key: str, layout: SpanLayout, columns: Columns) -> None:
    strings = layout.batch.strings
    renamed = np.array([readable != recorded for readable, recorded in zip(layout.readable_names, strings)]
                       + [False, False])
    spans = np.flatnonzero(renamed[layout.name])
    columns.add_values(key, spans, [strings[int(layout.name[i])] for i in spans])


# ------------------------------------------------------------------------------------------ root spans
def step_number(key: str, layout: SpanLayout, columns: Columns) -> None:
    step = layout.root_is_step
    columns.add(key, "int", layout.root_spans[step], layout.traces.numbers[layout.root_traces][step])


def window_start(key: str, layout: SpanLayout, columns: Columns) -> None:
    window = ~layout.root_is_step
    columns.add(key, "int", layout.root_spans[window], layout.traces.window_start_ns[layout.root_traces][window])


def rank(key: str, layout: SpanLayout, columns: Columns) -> None:
    columns.add(key, "int", layout.root_spans, np.full(len(layout.root_traces), layout.plan.rank))


def run_id(key: str, layout: SpanLayout, columns: Columns) -> None:
    columns.add_values(key, layout.root_spans, [layout.plan.run_id] * len(layout.root_traces))


def span_budget(key: str, layout: SpanLayout, columns: Columns) -> None:
    columns.add(key, "int", layout.root_spans, np.full(len(layout.root_traces), layout.plan.options.budget))


def individual_spans(key: str, layout: SpanLayout, columns: Columns) -> None:
    per_trace = np.bincount(layout.plan.trace_of_row[layout.event_rows], minlength=len(layout.traces))
    columns.add(key, "int", layout.root_spans, per_trace[layout.root_traces])


def aggregated_events(key: str, layout: SpanLayout, columns: Columns) -> None:
    aggregates = layout.aggregates
    per_trace = np.bincount(aggregates.trace, weights=aggregates.count, minlength=len(layout.traces))
    columns.add(key, "int", layout.root_spans, per_trace.astype(np.int64)[layout.root_traces])


def span_selection(key: str, layout: SpanLayout, columns: Columns) -> None:
    rule = (f"costliest GPU ops (with launch calls) and API calls by duration within "
            f"{layout.plan.options.budget} spans; the rest aggregated per (trace, kind, name)")
    columns.add_values(key, layout.root_spans, [rule] * len(layout.root_traces))


def top_kernels(key: str, layout: SpanLayout, columns: Columns) -> None:
    """Names of the kernels with the most GPU time in each trace."""
    plan, batch = layout.plan, layout.batch
    kernels = plan.device_rows[batch.kind[plan.device_rows] == Kind.KERNEL]
    tops: list[list[str]] = [[] for _ in range(len(plan.traces))]
    if len(kernels) and plan.options.top_kernels > 0:
        stride = len(batch.strings) + 1
        keys, group = np.unique(plan.trace_of_row[kernels] * stride + batch.name[kernels], return_inverse=True)
        total = np.bincount(group, weights=batch.duration_ns[kernels])
        for k in np.lexsort((-total, keys // stride)).tolist():
            trace = int(keys[k] // stride)
            if len(tops[trace]) < plan.options.top_kernels:
                tops[trace].append(demangle(batch.strings[int(keys[k] % stride)]))
    _set_root_lists(key, layout, columns, tops)


def top_operators(key: str, layout: SpanLayout, columns: Columns) -> None:
    _set_root_lists(key, layout, columns, layout.figures.top_operators)


def top_operator(key: str, layout: SpanLayout, columns: Columns) -> None:
    _set_root_lists(key, layout, columns, layout.figures.top_operators, first=True)


def _set_root_lists(key: str, layout: SpanLayout, columns: Columns, per_trace: list[list[str]],
                    first: bool = False) -> None:
    """A list (or with ``first`` its first item) on each root span whose trace has a non-empty list."""
    roots = layout.root_traces.tolist()
    spans = [position for position, trace in enumerate(roots) if per_trace[trace]]
    columns.add_values(key, np.asarray(spans, np.int64),
                       [per_trace[roots[p]][0] if first else per_trace[roots[p]] for p in spans])


def peak_allocated(key: str, layout: SpanLayout, columns: Columns) -> None:
    _set_root_bytes(key, layout, columns, layout.figures.peak_allocated)


def peak_reserved(key: str, layout: SpanLayout, columns: Columns) -> None:
    _set_root_bytes(key, layout, columns, layout.figures.peak_reserved)


def _set_root_bytes(key: str, layout: SpanLayout, columns: Columns, per_trace: np.ndarray) -> None:
    values = per_trace[layout.root_traces]
    columns.add(key, "int", layout.root_spans[values >= 0], values[values >= 0])


def flops(key: str, layout: SpanLayout, columns: Columns) -> None:
    """The FLOPs of the operators in each root's trace, where any were counted."""
    values = layout.figures.flops[layout.root_traces]
    columns.add(key, "double", layout.root_spans[values > 0], values[values > 0])


def mfu(key: str, layout: SpanLayout, columns: Columns) -> None:
    """Each step root's FLOPs over what the rank's GPUs could do in the step at the device's peak."""
    plan, figures = layout.plan, layout.figures
    peak = peak_of(meta_device_names([plan.meta]), figures.flops_by_dtype)
    batch = plan.batch
    gpus = len(distinct(batch.device[batch.kind == Kind.KERNEL]))
    traces = layout.root_traces
    step = plan.traces.is_step[traces] & (figures.flops[traces] > 0)
    spans, values = [], []
    for position in np.flatnonzero(step).tolist():
        t = int(traces[position])
        seconds = float(plan.traces.end_ns[t] - plan.traces.start_ns[t]) / 1e9
        value = mfu_of(float(figures.flops[t]), seconds, gpus, peak)
        if value is not None:
            spans.append(position)
            values.append(value)
    columns.add(key, "double", np.asarray(spans, np.int64), np.asarray(values, np.float64))


# ------------------------------------------------------------------------------------ individual spans
def synchronizing(key: str, layout: SpanLayout, columns: Columns) -> None:
    """Blocking synchronization calls (cudaStreamSynchronize, cuCtxSynchronize, cudaEventSynchronize...;
    not cudaStreamWaitEvent, which only enqueues a wait on the GPU)."""
    calls = _event_spans_of(layout, (Kind.RUNTIME, Kind.DRIVER))
    if len(calls):
        blocking_name = np.array([bool(_BLOCKING_CALL.search(n)) for n in layout.batch.strings] or [False])
        blocking = calls[blocking_name[layout.batch.name[layout.event_rows][calls]]]
        columns.add(key, "bool", layout.event_spans[blocking], np.ones(len(blocking), bool))


def _launched(layout: SpanLayout) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(positions, start of the event, launch call row)`` of the individual spans with a launch call."""
    launch = layout.plan.launch_of_row[layout.event_rows]
    has_launch = np.flatnonzero(launch >= 0)
    return has_launch, layout.batch.start_ns[layout.event_rows][has_launch], launch[has_launch]


def launch_latency(key: str, layout: SpanLayout, columns: Columns) -> None:
    """Nsight's definition: GPU start - launch call start."""
    positions, start, launch = _launched(layout)
    columns.add(key, "int", layout.event_spans[positions], start - layout.batch.start_ns[launch])


def launch_delay(key: str, layout: SpanLayout, columns: Columns) -> None:
    """HTA's definition: GPU start - launch call end, clipped at 0."""
    positions, start, launch = _launched(layout)
    columns.add(key, "int", layout.event_spans[positions], np.maximum(start - layout.batch.end_ns[launch], 0))


def kernel_class(key: str, layout: SpanLayout, columns: Columns) -> None:
    ops = _event_spans_of(layout, GPU_OP_KINDS)
    if len(ops):
        # Classify each distinct (kind, name) once, then map back to every op.
        batch, op_rows = layout.batch, layout.event_rows[ops]
        keys = (batch.kind[op_rows].astype(np.int64) << 32) | batch.name[op_rows].astype(np.int64)
        _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        klass = classify(batch, op_rows[first])[inverse]
        class_ids = np.array([columns.value_id(c) for c in KERNEL_CLASSES], np.int64)
        columns.add(key, "value", layout.event_spans[ops], class_ids[klass])


def bandwidth(key: str, layout: SpanLayout, columns: Columns) -> None:
    """Bytes / duration of copies and memsets, in GB/s."""
    moves = _event_spans_of(layout, (Kind.MEMCPY, Kind.MEMSET))
    rows = layout.event_rows[moves]
    nbytes, duration = layout.batch.bytes[rows], layout.batch.duration_ns[rows]
    measurable = np.flatnonzero((nbytes >= 0) & (duration > 0))
    columns.add(key, "double", layout.event_spans[moves][measurable], nbytes[measurable] / duration[measurable])


def memcpy_kind(key: str, layout: SpanLayout, columns: Columns) -> None:
    copies = _event_spans_of(layout, (Kind.MEMCPY,))
    subkind = layout.batch.subkind[layout.event_rows][copies]
    value_ids = np.array([columns.value_id(m.name) for m in MemcpyKind], np.int64)
    columns.add(key, "value", layout.event_spans[copies], value_ids[np.minimum(subkind, len(MemcpyKind) - 1)])


def sync_kind(key: str, layout: SpanLayout, columns: Columns) -> None:
    syncs = _event_spans_of(layout, (Kind.SYNC,))
    subkind = layout.batch.subkind[layout.event_rows][syncs]
    value_ids = np.array([columns.value_id(s.name.lower()) for s in SyncKind], np.int64)
    columns.add(key, "value", layout.event_spans[syncs], value_ids[np.minimum(subkind, len(SyncKind) - 1)])


# ------------------------------------------------------------------------------------- aggregate spans
def aggregated(key: str, layout: SpanLayout, columns: Columns) -> None:
    columns.add(key, "bool", layout.aggregate_spans, np.ones(len(layout.aggregates), bool))


def aggregate_count(key: str, layout: SpanLayout, columns: Columns) -> None:
    columns.add(key, "int", layout.aggregate_spans, layout.aggregates.count)


def aggregate_duration(key: str, layout: SpanLayout, columns: Columns) -> None:
    columns.add(key, "int", layout.aggregate_spans, layout.aggregates.total_ns)


def aggregate_max_duration(key: str, layout: SpanLayout, columns: Columns) -> None:
    columns.add(key, "int", layout.aggregate_spans, layout.aggregates.max_ns)


def aggregate_bytes(key: str, layout: SpanLayout, columns: Columns) -> None:
    """Aggregated copies and memsets keep their summed bytes."""
    moves = np.isin(layout.aggregates.kind, [Kind.MEMCPY, Kind.MEMSET])
    columns.add(key, "int", layout.aggregate_spans[moves], layout.aggregates.total_bytes[moves])
