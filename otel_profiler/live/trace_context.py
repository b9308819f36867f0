"""The training process's side of joined traces: the parent's ``TRACEPARENT`` (read once, one warning
when malformed), the run event that becomes the run span, and the job's own OpenTelemetry span
current as each step begins.

The job's span is read through the OpenTelemetry API only when the job imported
``opentelemetry.trace`` itself (this module never imports it): at each step begin one
``sys.modules`` lookup, and, when the API is there, ``get_current_span().get_span_context()``.
A valid context is remembered for the step (the step root links to it); with
``OTEL_PROFILER_MARK_USER_SPANS`` the span also gets the event ``otel_profiler.step`` with the step's
trace id and number. Nothing here raises into the job: a failure costs one warning and turns the
reading off. The span model's side: ``otel_profiler.spans.context``.
"""

from __future__ import annotations

import logging
import os
import sys
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import numpy as np

from cuda_tracer.model.events import EventBatch, Kind

from ..profiler_warnings import warn
from ..spans.context import RUN_EVENT, TraceParent, parse_traceparent
from ..shared.ids import trace_id

if TYPE_CHECKING:
    from ..config.settings import Settings

log = logging.getLogger(__name__)

KEPT_STEPS = 512
"""User spans remembered for steps not yet handed to the exporter (the oldest go first)."""


def parent_from_settings(settings: Settings) -> TraceParent | None:
    """The parent context of ``TRACEPARENT``/``TRACESTATE``; a malformed value: one warning, ignored."""
    try:
        parent, problems = parse_traceparent(settings.traceparent, settings.tracestate)
    except Exception:  # never into the job
        log.debug("reading TRACEPARENT/TRACESTATE failed; no parent context", exc_info=True)
        return None
    for problem in problems:
        warn(problem)
    return parent


def run_event(start_ns: int, end_ns: int, rank: int) -> EventBatch:
    """The PROFILER event covering the run, from which the exporter makes the run span."""
    return EventBatch.from_columns([RUN_EVENT], kind=[Kind.PROFILER], name=[0], start_ns=[start_ns],
                                   end_ns=[max(end_ns, start_ns)], rank=[rank], pid=[os.getpid()])


class RunSpan:
    """This rank's run span: the parent of ``TRACEPARENT`` (None: no run span) and when the run began;
    its event goes out once, with the last part."""

    def __init__(self, parent: TraceParent | None, start_ns: int) -> None:
        self.parent = parent
        self.start_ns = start_ns
        self.sent = False

    def last_event(self, rank: int, now_ns: int) -> EventBatch | None:
        """The run event, the first time it is asked for (None without a parent, or once sent)."""
        if self.parent is None or self.sent:
            return None
        self.sent = True
        return run_event(self.start_ns, now_ns, rank)

    def meta(self) -> dict[str, Any]:
        """The rank metadata's ``trace_parent`` (nothing without a parent)."""
        if self.parent is None:
            return {}
        return {"trace_parent": {**self.parent.as_meta(), "since_ns": self.start_ns}}


class UserSpans:
    """The job's current span at each step begin (see the module docstring)."""

    def __init__(self, mark: bool, run_id: str) -> None:
        self.mark = mark
        self.run_id = run_id
        self.off = False
        # step -> [trace id, span id]; the flush thread takes entries while steps add them: only
        # single calls that are atomic under the GIL (no iteration)
        self.links: OrderedDict[int, list[str]] = OrderedDict()

    def step_began(self, number: int, rank: int) -> None:
        """Called as step ``number`` begins. Never raises."""
        api = sys.modules.get("opentelemetry.trace")
        if api is None or self.off:
            return
        try:
            span = api.get_current_span()
            context = span.get_span_context()
            if not context.is_valid:
                return
            self.links[number] = [f"{context.trace_id:032x}", f"{context.span_id:016x}"]
            if len(self.links) > KEPT_STEPS:
                self.links.popitem(last=False)
            if self.mark and span.is_recording():
                hi, lo = trace_id(self.run_id, rank, "step", number)
                span.add_event("otel_profiler.step", {"otel_profiler.step": number,
                                                      "otel_profiler.trace_id": f"{hi:016x}{lo:016x}"})
        except Exception as exc:
            self.off = True
            warn(f"the job's OpenTelemetry spans are not linked to steps any more ({type(exc).__name__}: {exc})")

    def take(self, batch: EventBatch) -> dict[int, list[str]]:
        """The links of the steps whose STEP events are in ``batch`` (removed: each is sent once)."""
        if not self.links:
            return {}
        rows = np.flatnonzero(batch.kind == Kind.STEP)
        numbers = batch.extra("step")
        out = {}
        for i, row in enumerate(rows.tolist()):
            number = int(numbers.get(row, -1))
            link = self.links.pop(number, None)
            if link is not None:
                out[number] = link
        return out
