"""The session's metrics and OTLP exporter: made late, connected once both exist, closed last.

The exporter is made at the first write (a launcher that records nothing, such as the torchrun
agent, never starts an exporter process), in an environment marked so that no session starts in
its processes. The metrics (``metrics.publisher.MetricsService``) start once a step was recorded,
in the flush thread. Once both exist, the exporter's drop counters become metrics and OTLP metrics
go out through it. ``ExportWiring`` holds both for one session.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterator

from ..profiler_warnings import warn

if TYPE_CHECKING:
    from ..config.settings import Settings
    from ..export.exporter import Exporter
    from ..metrics.publisher import MetricsService

MakeExporter = Callable[["Settings", str], "Exporter | None"]
"""Makes the session's exporter from its settings and service name (None: nothing to export to)."""

EXPORTER_CHILD_ENV = "_OTEL_PROFILER_EXPORTER_CHILD"
"""Set (internally) in the environment our exporter process is spawned with: no session starts there."""


class ExportWiring:
    """The metrics and the OTLP exporter of one session."""

    def __init__(self, settings: Settings, resource: dict[str, Any], run_id: str) -> None:
        self.settings = settings
        self.resource = resource
        self.run_id = run_id
        self.metrics: MetricsService | None = None  # made once a step was recorded
        self.metrics_due = False  # a step was recorded: the flush thread starts the metrics
        self._metrics_made = False
        self.exporter: Exporter | None = None
        self._exporter_made = False  # made at the first write: launchers that record nothing
                                     # (the torchrun agent) never start an exporter process
        self._make_exporter: MakeExporter | None = None
        self._exporter_watched = False
        self._watch_lock = threading.Lock()

    def prepare(self, make_exporter: MakeExporter) -> None:
        """At start: the function that makes the exporter at the first write (``exporter_factory``)."""
        self._make_exporter = make_exporter

    def start_metrics_when_due(self) -> None:
        """Start the metrics once a step was recorded and they are not started yet."""
        if self.metrics_due and not self._metrics_made:
            self._start_metrics()

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

    def exporter_at_first_write(self) -> Exporter | None:
        """The exporter, made the first time this is asked (None when none is configured)."""
        if not self._exporter_made:
            self._exporter_made = True
            make = self._make_exporter
            self.exporter = make(self.settings, self.resource["service.name"]) if make is not None else None
            self._watch_exporter()
        return self.exporter

    def _watch_exporter(self) -> None:
        """Connect metrics and the exporter once both exist: its drop counters become metrics and
        OTLP metrics go out through it."""
        with self._watch_lock:
            if self.metrics is None or self.exporter is None or self._exporter_watched:
                return
            self._exporter_watched = True
        self.metrics.attach_exporter(self.exporter)

    def close_exporter(self, folder: str, timeout_s: float) -> None:
        """The last OTLP metrics, after the last batch; then the exporter gets ``timeout_s`` of
        network time (``folder`` is named if batches are lost)."""
        exporter = self.exporter
        if exporter is None:
            return
        if self.metrics is not None:
            self.metrics.export_now(last=True)
        exporter.profile_folder = folder
        exporter.close(timeout_s=timeout_s)

    def close_metrics(self) -> None:
        metrics, self.metrics = self.metrics, None
        if metrics is not None:
            metrics.close()  # never raises

    def forget_after_fork(self) -> None:
        """In a forked child: the metrics' threads did not survive the fork; the parent owns its port."""
        self.metrics = None
        self._watch_lock = threading.Lock()


def exporter_factory() -> MakeExporter:
    """A function making the OTLP exporter (None when none is configured); imports it now."""
    try:
        from ..export.exporter import exporter_from_settings
    except ImportError:
        return lambda settings, service: None

    def make(settings: Settings, service: str) -> Exporter | None:
        try:
            with _exporter_child_marked():
                return exporter_from_settings(settings, default_service=service)
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
