"""Where metric points come from, behind one interface (as client_python's ``Collector``): a
:class:`MetricSource` gives its current points when the Prometheus endpoint is scraped or an OTLP
snapshot is taken. ``MetricsService`` registers each source once (the system sampler, the
profile-derived metrics, the exporter's health) and reads them all the same way.
:class:`MetricsExporter` is what the metrics need of the exporter process's handle."""

from __future__ import annotations

from typing import Callable, Protocol

from . import points as m
from .points import MetricsSnapshot, Point


class MetricSource(Protocol):
    """Anything with metric points to give now (cumulative values, never reset)."""

    def points(self) -> list[Point]: ...


class MetricsExporter(Protocol):
    """The exporter process's handle as the metrics use it: its counters (drops, queue, spool) and,
    when it has a metrics endpoint, a snapshot queue."""

    @property
    def wants_metrics(self) -> bool: ...

    def counters(self) -> dict[str, int]: ...

    def submit_metrics(self, snapshot: MetricsSnapshot, last: bool = False) -> bool: ...


class ExporterHealth:
    """The exporter's counters as points: drops by reason, queued batches, spooled bytes."""

    def __init__(self, counters: Callable[[], dict[str, int]]) -> None:
        self._counters = counters

    def points(self) -> list[Point]:
        return exporter_points(self._counters())


class Overhead:
    """The CPU time a part of the metrics spent (``otel_profiler.overhead``), read when asked."""

    def __init__(self, component: str, cpu_seconds: Callable[[], float]) -> None:
        self._component, self._cpu_seconds = component, cpu_seconds

    def points(self) -> list[Point]:
        return [Point(m.OVERHEAD, {"otel_profiler.component": self._component}, self._cpu_seconds())]


def exporter_points(counters: dict[str, int]) -> list[Point]:
    """The exporter's health as points: drops by reason, queued batches, spooled bytes."""
    out = [Point(m.DROPPED, {"otel_profiler.reason": f"export_{key}"}, float(value))
           for key, value in counters.items() if "dropped" in key]
    if "batches_submitted" in counters:
        waiting = (counters["batches_submitted"] - counters.get("batches_received", 0)
                   - counters.get("batches_dropped_unread", 0))
        out.append(Point(m.EXPORTER_QUEUE, {}, float(max(0, waiting))))
    if "spool_bytes" in counters:
        out.append(Point(m.SPOOL_SIZE, {}, float(counters["spool_bytes"])))
    return out
