"""Where each span of a planned batch sits in the span table: the roots first, then the individual
spans (one per kept event), then one aggregate span per (trace, kind, name) of the other events.
:func:`lay_out` makes one frozen :class:`SpanLayout` from a ``plan.SpanPlan``; the attribute
catalogue (``attributes``) reads it to fill the attribute columns."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from cuda_tracer.model.events import EventBatch, Kind

from ..analysis.step_figures import RootFigures, root_figures
from ..names import demangled
from ..shared.ids import hash64, mix64
from .plan import SpanPlan, Traces

STEP_SPAN = "train.step"
WINDOW_SPAN = "otel_profiler.window"


@dataclass(frozen=True)
class Aggregates:
    """One aggregate span per (trace, kind, name) of the events that are not individual spans."""

    trace: np.ndarray
    kind: np.ndarray
    name: np.ndarray  # index into the batch's strings
    count: np.ndarray
    total_ns: np.ndarray
    max_ns: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    total_bytes: np.ndarray  # summed bytes of the counted events (copies and memsets)

    def __len__(self) -> int:
        return len(self.trace)


@dataclass(frozen=True)
class SpanLayout:
    """The spans of one planned batch, in table order: ``root_traces`` (trace indexes whose root is
    emitted), ``event_rows`` (batch rows of individual spans), then ``aggregates``."""

    plan: SpanPlan
    root_traces: np.ndarray
    event_rows: np.ndarray
    aggregates: Aggregates

    @property
    def batch(self) -> EventBatch:
        return self.plan.batch

    @property
    def traces(self) -> Traces:
        return self.plan.traces

    def __len__(self) -> int:
        return len(self.root_traces) + len(self.event_rows) + len(self.aggregates)

    @property
    def root_spans(self) -> np.ndarray:
        return np.arange(len(self.root_traces))

    @property
    def event_spans(self) -> np.ndarray:
        return np.arange(len(self.root_traces), len(self.root_traces) + len(self.event_rows))

    @property
    def aggregate_spans(self) -> np.ndarray:
        return np.arange(len(self.root_traces) + len(self.event_rows), len(self))

    @property
    def root_is_step(self) -> np.ndarray:
        return self.traces.is_step[self.root_traces]

    @cached_property
    def readable_names(self) -> list[str]:
        """Span names as a person reads them (demangled); ids hash the raw names."""
        return demangled(self.batch.strings)

    @cached_property
    def names(self) -> list[str]:
        """The span table's name strings: the batch's, then the two root span names."""
        return self.readable_names + [STEP_SPAN, WINDOW_SPAN]

    @cached_property
    def name(self) -> np.ndarray:
        """Per span: index into :attr:`names`."""
        strings = len(self.batch.strings)
        root_name = np.where(self.root_is_step, strings, strings + 1)
        return np.concatenate([root_name, self.batch.name[self.event_rows],
                               self.aggregates.name]).astype(np.int64)

    @cached_property
    def span_kind(self) -> np.ndarray:
        """Per span: the event kind (roots: STEP, windows included)."""
        return np.concatenate([np.full(len(self.root_traces), Kind.STEP), self.batch.kind[self.event_rows],
                               self.aggregates.kind]).astype(np.int64)

    @cached_property
    def figures(self) -> RootFigures:
        """Top operators and GPU memory peaks per trace (``analysis.step_figures``)."""
        plan = self.plan
        return root_figures(plan.batch, plan.correlation, plan.trace_of_row, plan.traces.start_ns,
                            plan.traces.end_ns, plan.options.top_kernels)


def lay_out(plan: SpanPlan) -> SpanLayout:
    """The layout of a plan's spans: roots of the traces emitted here, kept events, aggregates."""
    exported = plan.trace_of_row >= 0
    return SpanLayout(plan, np.flatnonzero(plan.traces.emit_root), np.flatnonzero(plan.individual & exported),
                      _aggregates(plan, np.flatnonzero(~plan.individual & exported)))


def _aggregates(plan: SpanPlan, rows: np.ndarray) -> Aggregates:
    batch = plan.batch
    key = (plan.trace_of_row[rows] << 40) | (batch.kind[rows].astype(np.int64) << 32) | \
        batch.name[rows].astype(np.int64)
    keys, group = np.unique(key, return_inverse=True)
    n = len(keys)
    duration = batch.duration_ns[rows]
    max_ns = np.zeros(n, np.int64)
    np.maximum.at(max_ns, group, duration)
    start = np.full(n, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(start, group, batch.start_ns[rows])
    end = np.zeros(n, np.int64)
    np.maximum.at(end, group, batch.end_ns[rows])
    return Aggregates(
        trace=(keys >> 40).astype(np.int64), kind=((keys >> 32) & 0xFF).astype(np.int64),
        name=(keys & 0xFFFFFFFF).astype(np.int64), count=np.bincount(group, minlength=n).astype(np.int64),
        total_ns=np.bincount(group, weights=duration, minlength=n).astype(np.int64), max_ns=max_ns,
        start_ns=start, end_ns=end,
        total_bytes=np.bincount(group, weights=np.maximum(batch.bytes[rows], 0), minlength=n).astype(np.int64))


def aggregate_span_ids(traces: Traces, aggregates: Aggregates, strings: list[str]) -> np.ndarray:
    """Deterministic span id of each aggregate: hashes its trace id, kind and raw name."""
    name_hash = np.array([hash64(s) for s in strings] or [0], np.uint64)
    with np.errstate(over="ignore"):
        ids = mix64(traces.id_hi[aggregates.trace] ^ mix64(traces.id_lo[aggregates.trace])
                    ^ name_hash[aggregates.name] ^ (aggregates.kind.astype(np.uint64) << np.uint64(56)))
    ids[ids == 0] = 1
    return ids
