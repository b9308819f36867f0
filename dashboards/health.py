"""*Profiler health*: events captured and dropped, the exporter (losses, queue, spool) and the
profiler's own CPU overhead."""

from __future__ import annotations

from otel_profiler.metrics import points as m

from .panels import Panel
from .recipes import gauge, over_range, per_second

UID, TITLE = "otel-profiler-health", "otel-profiler / Profiler health"
DESCRIPTION = "Events captured and dropped, the exporter's losses, queue and spool, and the profiler's own overhead."


def rows() -> list[tuple[str, list[Panel]]]:
    """The dashboard's rows and their panels."""
    return [
        ("Capture", [
            per_second("Events captured per second by kind", m.EVENTS, "short", "otel_profiler_kind", stacked=True),
            over_range("Events captured (range)", m.EVENTS, "short", "job"),
            per_second("Events dropped per second by reason", m.DROPPED, "short", "otel_profiler_reason"),
            over_range("Exporter losses (range): queue full, spans dropped", m.DROPPED, "short",
                       "otel_profiler_reason", otel_profiler_reason='=~"export_.*"'),
        ]),
        ("Exporter", [
            gauge("Batches waiting for the exporter process", m.EXPORTER_QUEUE, "short", "job, instance", "max"),
            gauge("Spool: OTLP requests waiting for the endpoint", m.SPOOL_SIZE, "bytes", "job, instance", "max"),
        ]),
        ("Overhead", [
            per_second("Profiler CPU by component (cores)", m.OVERHEAD, "percentunit", "otel_profiler_component",
                       stacked=True),
            over_range("Profiler CPU time per process (range)", m.OVERHEAD, "s", "job, instance"),
        ]),
    ]
