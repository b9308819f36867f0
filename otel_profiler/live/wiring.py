"""The session's metrics and OTLP exporter: made late, connected once both exist, closed last.

The exporter is made at the first write (a launcher that records nothing, such as the torchrun
agent, never starts an exporter process), in an environment marked so that no session starts in
its processes. The metrics (``metrics.publisher.MetricsService``) start once a step was recorded,
in the flush thread. Once both exist, the exporter's drop counters become metrics and OTLP metrics
go out through it. Mixed into ``session.Session``.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any, Iterator

from ..profiler_warnings import warn

EXPORTER_CHILD_ENV = "_OTEL_PROFILER_EXPORTER_CHILD"
"""Set (internally) in the environment our exporter process is spawned with: no session starts there."""


class ExportWiring:
    """Metrics and exporter of one session (state lives in ``Session.__init__``)."""

    settings: Any
    resource: dict[str, Any]
    run_id: str
    metrics: Any
    _exporter: Any
    _metrics_made: bool
    _exporter_watched: bool
    _watch_lock: threading.Lock

    def _start_metrics(self) -> None:
        """Once a step was recorded, not in ``start``: a launcher's session (the torchrun agent)
        records no step and must not take rank 0's Prometheus port. Runs in the flush thread, so
        the imports, the endpoint and the samplers never delay a training step. Never raises."""
        self._metrics_made = True
        try:
            from ..metrics.publisher import MetricsService

            self.metrics = MetricsService().start(self.settings, self.resource, run_id=self.run_id)
            self._watch_exporter()
        except Exception as exc:
            warn(f"metrics are off ({type(exc).__name__}: {exc})")

    def _watch_exporter(self) -> None:
        """Connect metrics and the exporter once both exist: its drop counters become metrics and
        OTLP metrics go out through it."""
        with self._watch_lock:
            if self.metrics is None or self._exporter is None or self._exporter_watched:
                return
            self._exporter_watched = True
        self.metrics.attach_exporter(self._exporter)

    def _close_metrics(self) -> None:
        metrics, self.metrics = self.metrics, None
        if metrics is not None:
            metrics.close()  # never raises


def exporter_factory() -> Any:
    """A function making the OTLP exporter (None when none is configured); imports it now."""
    try:
        from ..export.exporter import exporter_from_env
    except ImportError:
        return lambda settings, service: None

    def make(settings: Any, service: str) -> Any:
        try:
            with _exporter_child_marked():
                return exporter_from_env(settings, default_service=service)
        except Exception as exc:
            warn(f"OTLP export is off ({type(exc).__name__}: {exc})")
            return None

    return make


@contextlib.contextmanager
def _exporter_child_marked() -> Iterator[None]:
    """Mark the environment while the exporter's processes are spawned (its worker and
    multiprocessing's resource tracker inherit it), so the bootstrap in them starts no session.

    multiprocessing's spawn takes no per-process environment, so the mark is in ``os.environ`` for
    the few milliseconds the exporter takes to start; a process another thread starts in that time
    is not profiled either.
    """
    os.environ[EXPORTER_CHILD_ENV] = "1"
    try:
        yield
    finally:
        os.environ.pop(EXPORTER_CHILD_ENV, None)
