"""``MetricsService``: the one object a profiling session holds for metrics.

It wires the parts together: the system sampler thread (``system``), the profile-derived
aggregator (``profile``), the Prometheus endpoint (``prometheus``) and OTLP metrics: a thread
that hands a ``MetricsSnapshot`` of every point to the exporter process every
``OTEL_METRIC_EXPORT_INTERVAL`` ms, which encodes (``metrics_otlp``) and sends it. Nothing runs
unless an output is configured (``OTEL_PROFILER_PROMETHEUS_PORT`` or an OTLP metrics endpoint).
Every method catches everything: a metrics failure is one warning and the training job goes on
without that part.

Session wiring::

    # at the first recorded step (not in Session.start: the torchrun agent runs a session too, records
    # no step, and would otherwise take rank 0's port), in the flush thread:
    self.metrics = MetricsService().start(self.settings, self.resource, run_id=self.run_id)
    # once the exporter exists too (its drop counters become metrics; OTLP metrics start):
    self.metrics.attach_exporter(exporter)
    # in flush(), after self.writer.write(meta, batch):
    self.metrics.observe_batch(batch, meta)
    # in close(): the last OTLP export before the exporter closes, then stop
    self.metrics.export_now(last=True); exporter.close(); self.metrics.close()
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from ..config import Settings
from ..profiler_warnings import warn
from .points import MetricsSnapshot, Point
from .sources import ExporterHealth, MetricsExporter, MetricSource, Overhead

if TYPE_CHECKING:
    from .profile import ProfileMetrics
    from .prometheus import Endpoint, PointsCollector
    from .system import SystemSampler

log = logging.getLogger(__name__)


class MetricsService:
    """Metrics of one process. ``start`` returns self; every method never raises."""

    def __init__(self) -> None:
        self.sampler: SystemSampler | None = None
        self.profile: ProfileMetrics | None = None
        self.endpoint: Endpoint | None = None
        self.collector: PointsCollector | None = None
        self.wants_otlp = False
        self.exporter: MetricsExporter | None = None  # once attached, when OTLP metrics go through it
        self._resource: dict[str, Any] = {}
        self._interval_s = 60.0
        self._start_ns = time.time_ns()
        self._stop = threading.Event()
        self._shipper: threading.Thread | None = None
        self._sources: list[MetricSource] = []  # each registered once (``register``), read in order

    @property
    def active(self) -> bool:
        return self.endpoint is not None or self.wants_otlp

    @property
    def url(self) -> str | None:
        return self.endpoint.url if self.endpoint is not None else None

    # ------------------------------------------------------------------ lifecycle
    def start(self, settings: Settings, resource_attributes: dict[str, Any] | None = None,
              run_id: str | None = None) -> "MetricsService":
        """Start what ``settings`` asks for. ``run_id``: the session's run id, used
        when the batch metadata has none (exemplar trace ids follow ``OTEL_PROFILER_RUN_ID`` first,
        as the span exporter does)."""
        try:
            self._start(settings, dict(resource_attributes or {}), run_id)
        except Exception as exc:
            warn(f"metrics are off after an internal error ({type(exc).__name__}: {exc})")
            self.close()
        return self

    def _start(self, settings: Settings, resource: dict[str, Any], run_id: str | None) -> None:
        if not metrics_wanted(settings):
            return
        host, port = prometheus_address(settings)
        self.wants_otlp = otlp_wanted(settings) or console_wanted(settings)
        from .profile import ProfileMetrics
        from .system import SystemSampler

        self._resource = resource
        self._interval_s = settings.otel_metric_export_interval / 1e3
        self.profile = profile = ProfileMetrics(settings.run_id or None, run_id)
        profile.expect_steps(_resource_rank(resource))
        self.sampler = sampler = SystemSampler(settings.metrics_interval_s)
        self.register(sampler)
        self.register(Overhead("sampler", lambda: sampler.cpu_seconds))
        self.register(profile)
        if port:
            self._start_endpoint(settings, host, port + _resource_rank(resource, "ml.local_rank"))
        if not self.active:
            self.close()
            return
        sampler.start()

    def _start_endpoint(self, settings: Settings, host: str, port: int) -> None:
        from prometheus_client.registry import CollectorRegistry

        from .prometheus import Endpoint, PointsCollector

        registry = CollectorRegistry(auto_describe=False)
        self.collector = PointsCollector([self])
        registry.register(self.collector)
        self.endpoint = Endpoint.start(registry, host, port,
                                       settings.prometheus_cert_file,
                                       settings.prometheus_key_file,
                                       settings.prometheus_basic_auth, warn=warn)

    def attach_exporter(self, exporter: MetricsExporter) -> None:
        """Expose ``exporter``'s drop counters as metrics and, when it has a metrics endpoint and
        OTLP metrics are wanted, hand it a snapshot every ``OTEL_METRIC_EXPORT_INTERVAL``."""
        try:
            self.register(ExporterHealth(exporter.counters))
            if not self.wants_otlp or not exporter.wants_metrics or self.exporter:
                return
            self.exporter = exporter
            self._shipper = threading.Thread(target=self._ship_loop, name="otel-profiler-metrics-otlp",
                                             daemon=True)
            self._shipper.start()
        except Exception as exc:
            warn(f"OTLP metrics are off ({type(exc).__name__}: {exc})")

    def _ship_loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.export_now()

    def export_now(self, last: bool = False) -> bool:
        """Hand every current point to the exporter process (cumulative values since start);
        ``last``: the final export before the exporter closes, queued even while one is in flight."""
        exporter = self.exporter
        if exporter is None:
            return False
        try:
            return exporter.submit_metrics(MetricsSnapshot(self._resource, self.points(), self._start_ns,
                                                           time.time_ns()), last=last)
        except Exception as exc:
            warn(f"OTLP metrics skipped an export ({type(exc).__name__}: {exc})")
            return False

    # ------------------------------------------------------------------ data
    def observe_batch(self, batch: Any, meta: dict[str, Any] | None = None) -> None:
        """Fold one flushed EventBatch (and its rank metadata, for trace ids) into the metrics."""
        if self.profile is None:
            return
        try:
            self.profile.observe(batch, meta)
        except Exception as exc:
            warn(f"profile-derived metrics skipped a batch ({type(exc).__name__}: {exc})")

    def register(self, source: MetricSource) -> None:
        """Read ``source``'s points at every scrape and OTLP export from now on (the exporter's
        health, ``ExporterHealth``: its ``*dropped*`` counters as ``otel_profiler.events.dropped
        {otel_profiler.reason="export_<name>"}``, the batches it has not taken yet as
        ``otel_profiler.exporter.queue.size``, its spool as ``otel_profiler.exporter.spool.size``)."""
        self._sources.append(source)

    def points(self) -> list[Point]:
        """Every current point, source by source: the latest system sample and the sampler's
        overhead, profile-derived state, the exporter's health. A source that fails is left out."""
        out: list[Point] = []
        for source in list(self._sources):
            try:
                out += source.points()
            except Exception:
                log.debug("a metrics source failed; its points are left out", exc_info=True)
        return out

    def close(self) -> None:
        """Stop OTLP exports, the endpoint and the sampler. Idempotent, never raises (the session
        calls ``export_now`` for the last export before it closes the exporter)."""
        self._stop.set()
        shipper, self._shipper, self.exporter = self._shipper, None, None
        if shipper is not None and shipper is not threading.current_thread():
            shipper.join(timeout=1.0)
        for part in ("endpoint", "sampler"):
            obj = getattr(self, part)
            setattr(self, part, None)
            if obj is not None:
                try:
                    obj.close()
                except Exception:
                    log.debug("closing a metrics reader or provider failed", exc_info=True)


def metrics_wanted(settings: Settings) -> bool:
    """Whether settings ask for any metrics: a Prometheus port or an OTLP metrics endpoint."""
    if not settings.metrics or settings.otel_sdk_disabled:
        return False
    return bool(prometheus_address(settings)[1]) or otlp_wanted(settings) or console_wanted(settings)


def prometheus_address(settings: Settings) -> tuple[str, int]:
    """Host and base port (0: none) of the /metrics endpoint: the profiler's own
    ``OTEL_PROFILER_PROMETHEUS_HOST``/``PORT`` when that port is set, else the standard
    ``OTEL_EXPORTER_PROMETHEUS_HOST``/``PORT`` when ``OTEL_METRICS_EXPORTER`` lists prometheus."""
    port = settings.prometheus_port
    if port:
        return settings.prometheus_host, port
    if "prometheus" in settings.otel_metrics_exporter:
        return settings.otel_exporter_prometheus_host, settings.otel_exporter_prometheus_port
    return "", 0


def console_wanted(settings: Settings) -> bool:
    """``OTEL_METRICS_EXPORTER`` lists console: snapshots as OTLP JSON lines on stdout."""
    return "console" in settings.otel_metrics_exporter


def otlp_wanted(settings: Settings) -> bool:
    """An OTLP metrics target was resolved (``config.load``)."""
    return settings.metrics_target is not None


def _resource_rank(resource: dict[str, Any], key: str = "ml.rank") -> int:
    """The rank (``ml.rank``) or local rank (``ml.local_rank``) the session recorded in its
    resource (0 without one)."""
    try:
        return int(resource.get(key, 0))
    except (TypeError, ValueError):
        return 0
