"""The traces a run joins: a parent process's W3C trace context (``TRACEPARENT``/``TRACESTATE``) and
the job's own OpenTelemetry spans. Imports no OpenTelemetry package.

- :func:`parse_traceparent` checks the W3C format (version ``00``, 32 hex digits of trace id and 16
  of span id, neither all zero, two of flags; ``TRACESTATE``: at most 512 printable characters of
  ``key=value`` members) and returns the problem in words for the one warning the job gets.
- The training process puts the context and its session's start in each rank's metadata
  (``trace_parent``, see :func:`context_meta`) and, at its last flush, a ``PROFILER`` event named :data:`RUN_EVENT` that
  covers the run; the user's span current as each step began travels as ``user_spans``
  (step number -> ``[trace id, span id]``, hex) in the metadata handed to the exporter.
- :func:`join_context` (called by ``build.build_spans``) gives every root span of a batch a link to
  the rank's *run span* and each step root a link to the user's span, and makes the run span itself
  when the batch holds the run event: name :data:`RUN_SPAN`, a child of the parent's span in the
  parent's trace, ``TRACESTATE`` as its trace state. Its id is deterministic
  (:func:`run_span_id`), so roots exported before it link to it already.
Without a context and user spans the table is returned as it is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from cuda_tracer.model.events import EventBatch, Kind

from ..shared.ids import hash64

from .table import LinkColumn, SpanTable

RUN_EVENT = "otel-profiler run"
"""Name of the PROFILER event, from the start of the session to its close, that carries the run span."""
RUN_SPAN = "otel_profiler.run"
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_MEMBER = re.compile(r"[a-z0-9][a-z0-9_\-*/@]{0,255}=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]")


@dataclass(frozen=True)
class TraceParent:
    """A parent's span: trace id and span id (lowercase hex), trace flags and trace state."""

    trace_id: str
    span_id: str
    flags: int = 1
    state: str = ""

    def as_meta(self) -> dict[str, Any]:
        return {"trace_id": self.trace_id, "span_id": self.span_id, "flags": self.flags, "state": self.state}


def parse_traceparent(traceparent: str, tracestate: str = "") -> tuple[TraceParent | None, list[str]]:
    """``(context or None, problems)``. An empty ``traceparent`` is no context and no problem; a
    malformed one is a problem naming ``TRACEPARENT``; a malformed ``tracestate`` a problem naming
    ``TRACESTATE`` (the context is kept without it)."""
    text = traceparent.strip()
    if not text:
        return None, []
    m = _TRACEPARENT.fullmatch(text)
    if m is None:
        return None, [f"TRACEPARENT {_shown(text)} is not a W3C traceparent "
                      "(00-<32 hex trace id>-<16 hex span id>-<2 hex flags>); the run joins no parent trace"]
    version, trace_id, span_id, flags = m.groups()
    problem = ("version must be 00" if version != "00" else
               "the trace id is all zeros" if not int(trace_id, 16) else
               "the span id is all zeros" if not int(span_id, 16) else "")
    if problem:
        return None, [f"TRACEPARENT {_shown(text)}: {problem}; the run joins no parent trace"]
    state, problems = tracestate.strip(), []
    if state and not _valid_tracestate(state):
        problems.append(f"TRACESTATE {_shown(state)} is not a W3C tracestate (key=value,...; at most 512 "
                        "characters); it is not passed on")
        state = ""
    return TraceParent(trace_id, span_id, int(flags, 16), state), problems


def _valid_tracestate(state: str) -> bool:
    members = [m.strip() for m in state.split(",")]
    return len(state) <= 512 and len(members) <= 32 and all(_MEMBER.fullmatch(m) for m in members if m)


def _shown(text: str) -> str:
    """A value quoted for a warning: printable, at most 80 characters."""
    clean = "".join(c if c.isprintable() else "?" for c in text)
    return repr(clean if len(clean) <= 80 else clean[:77] + "...")


def context_meta(meta: Mapping[str, Any]) -> tuple[TraceParent | None, int]:
    """The parent context recorded in a rank's metadata (``trace_parent``) and the start of the
    session that recorded it (``since_ns``, 0 if unknown); ``(None, 0)`` without one."""
    tp = meta.get("trace_parent")
    if not isinstance(tp, dict):
        return None, 0
    try:
        found, _ = parse_traceparent(f"00-{tp.get('trace_id', '')}-{tp.get('span_id', '')}-"
                                     f"{int(tp.get('flags', 1)) & 0xFF:02x}", str(tp.get("state", "")))
        return found, int(tp.get("since_ns", 0))
    except (TypeError, ValueError):
        return None, 0


def run_span_id(run_id: str, rank: int, parent: TraceParent, since_ns: int = 0) -> int:
    """The span id of a rank's run span under ``parent`` (deterministic; ``since_ns``, the session's
    start, tells apart two sessions of one process, such as two ``Profiler`` blocks)."""
    return hash64(run_id, rank, "run", parent.trace_id, parent.span_id, since_ns)


def merged_meta(older: dict[str, Any], newer: dict[str, Any]) -> dict[str, Any]:
    """The metadata of two batches sent as one: the newer's, with both batches' user-span links."""
    user = {**(older.get("user_spans") or {}), **(newer.get("user_spans") or {})}
    return {**newer, "user_spans": user} if user else newer


def _link_column(n: int) -> LinkColumn:
    return LinkColumn(np.zeros(n, np.uint64), np.zeros(n, np.uint64), np.zeros(n, np.uint64))


def _split(trace_hex: str) -> tuple[int, int]:
    return int(trace_hex[:16], 16), int(trace_hex[16:32], 16)


def join_context(table: SpanTable, meta: Mapping[str, Any], batch: EventBatch, run_id: str,
                 rank: int) -> SpanTable:
    """``table`` (a ``build.SpanTable``) with the links to the run span and to the user's spans, and
    the run span when ``batch`` holds the run event (module docstring)."""
    parent, since_ns = context_meta(meta)
    user = meta.get("user_spans") or {}
    if parent is None and not user:
        return table
    n = len(table)
    roots = np.flatnonzero(table.parent_id == 0)
    links: list[LinkColumn] = list(table.extra_links)
    if parent is not None and len(roots):
        run = _link_column(n)
        hi, lo = _split(parent.trace_id)
        run.trace_hi[roots], run.trace_lo[roots] = hi, lo
        run.span_id[roots] = run_span_id(run_id, rank, parent, since_ns)
        links.append(run)
    if user and len(roots):
        links.append(_user_links(table, roots, user))
    table = replace(table, extra_links=links)
    if parent is not None:
        for row in np.flatnonzero((batch.kind == Kind.PROFILER)).tolist():
            if batch.strings[int(batch.name[row])] == RUN_EVENT:
                table = _with_run_span(table, parent, run_span_id(run_id, rank, parent, since_ns), run_id, rank,
                                       int(batch.start_ns[row]), int(batch.end_ns[row]))
    return table


def _user_links(table: SpanTable, roots: np.ndarray, user: dict[Any, Any]) -> LinkColumn:
    """Each step root's link to the user span that was current as its step began."""
    col = _link_column(len(table))
    try:
        step = table.attr("otel_profiler.step")
    except KeyError:
        return col
    for row in roots.tolist():
        if step.present is not None and not step.present[row]:
            continue
        ids = user.get(int(step.values[row]))
        if ids is None:
            ids = user.get(str(int(step.values[row])))
        if ids and len(ids) == 2 and len(ids[0]) == 32 and len(ids[1]) == 16:
            col.trace_hi[row], col.trace_lo[row] = _split(ids[0])
            col.span_id[row] = int(ids[1], 16)
    return col


def _with_run_span(table: SpanTable, parent: TraceParent, span_id: int, run_id: str, rank: int,
                   start_ns: int, end_ns: int) -> SpanTable:
    """``table`` with the run span appended (one row; every attribute column grows by one)."""
    from .columns import AttrColumn

    n = len(table)
    hi, lo = _split(parent.trace_id)

    def grow(column: np.ndarray, value: Any) -> np.ndarray:
        return np.concatenate([column, np.array([value], column.dtype)])

    values = list(table.values)
    own: dict[str, tuple[str, int]] = {}  # the run span's attributes: key -> (type, value or value id)
    for key, type_, value in (("otel_profiler.kind", "value", "run"), ("otel_profiler.run.id", "value", run_id),
                              ("otel_profiler.rank", "int", rank)):
        if type_ == "value":
            values.append(value)
            value = len(values) - 1
        own[key] = (type_, int(value))
    attrs = []
    for a in table.attrs:
        present = np.ones(n, bool) if a.present is None else a.present
        mine = own.pop(a.key, None)
        attrs.append(AttrColumn(a.key, a.type, grow(a.values, mine[1] if mine else 0), grow(present, mine is not None)))
    for key, (type_, value) in own.items():
        column, present = np.zeros(n + 1, np.int64), np.zeros(n + 1, bool)
        column[n], present[n] = value, True
        attrs.append(AttrColumn(key, type_, column, present))
    links = [LinkColumn(grow(c.trace_hi, 0), grow(c.trace_lo, 0), grow(c.span_id, 0)) for c in table.extra_links]
    states = dict(table.trace_states)
    if parent.state:
        states[n] = parent.state
    return replace(
        table, names=table.names + [RUN_SPAN], trace_hi=grow(table.trace_hi, hi), trace_lo=grow(table.trace_lo, lo),
        span_id=grow(table.span_id, span_id),
        parent_id=grow(table.parent_id, int(parent.span_id, 16)), link_id=grow(table.link_id, 0),
        name=grow(table.name, len(table.names)), start_ns=grow(table.start_ns, start_ns),
        end_ns=grow(table.end_ns, end_ns), attrs=attrs, values=values, source_row=grow(table.source_row, -1),
        extra_links=links, trace_states=states)
