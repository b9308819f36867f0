"""``MetricsService``: the one object a profiling session holds for metrics.

It wires the parts together: the system sampler thread (``system_metrics``), the profile-derived
aggregator (``profile_metrics``), the Prometheus endpoint (``prometheus``) and OTLP metrics
(``metrics_otlp``). Nothing runs unless an output is configured (``OTEL_PROFILER_PROMETHEUS_PORT``
or an OTLP endpoint). Every method catches everything: a metrics failure is one warning and the
training job goes on without that part.

Session wiring (three calls)::

    # at the first recorded step (not in Session.start: the torchrun agent runs a session too, records
    # no step, and would otherwise take rank 0's port), e.g. in _record_step when self.metrics is None:
    self.metrics = MetricsService().start(self.settings, self.resource, run_id=self.run_id)
    # in flush(), after self.writer.write(meta, batch):
    self.metrics.observe_batch(batch, meta)
    # in close():
    self.metrics.close()
"""

from __future__ import annotations

import time
from typing import Any, Callable

from . import metric_points as m
from .metric_points import Point


def warn(message: str) -> None:
    """The profiler's warning channel (``ProfilerWarning``), stderr if that is unavailable."""
    try:
        from .session import warn as session_warn

        session_warn(message)
    except Exception:
        from .system_metrics import note

        note(message)


class MetricsService:
    """Metrics of one process. ``start`` returns self; every method never raises."""

    def __init__(self) -> None:
        self.sampler: Any = None
        self.profile: Any = None
        self.endpoint: Any = None
        self.otlp: Any = None
        self.collector: Any = None
        self._watched: list[Callable[[], dict]] = []
        self._cache: tuple[float, list[Point]] = (0.0, [])

    @property
    def active(self) -> bool:
        return self.endpoint is not None or self.otlp is not None

    @property
    def url(self) -> str | None:
        return self.endpoint.url if self.endpoint is not None else None

    # ------------------------------------------------------------------ lifecycle
    def start(self, settings: Any, resource_attributes: dict[str, Any] | None = None,
              run_id: str | None = None, otlp_exporter: Any = None) -> "MetricsService":
        """Start what ``settings`` (``config.load()``) asks for. ``run_id``: the session's run id, used
        when the batch metadata has none (exemplar trace ids follow ``OTEL_PROFILER_RUN_ID`` first,
        as the span exporter does). ``otlp_exporter`` replaces the OTLP metric exporter (tests)."""
        try:
            self._start(settings.values if hasattr(settings, "values") else dict(settings),
                        dict(resource_attributes or {}), run_id, otlp_exporter)
        except Exception as exc:
            warn(f"metrics are off after an internal error ({type(exc).__name__}: {exc})")
            self.close()
        return self

    def _start(self, v: dict[str, Any], resource: dict[str, Any], run_id: str | None,
               otlp_exporter: Any) -> None:
        if not v.get("OTEL_PROFILER_METRICS", True) or v.get("OTEL_SDK_DISABLED"):
            return
        from .profile_metrics import ProfileMetrics
        from .system_metrics import SystemSampler

        port = int(v.get("OTEL_PROFILER_PROMETHEUS_PORT") or 0)
        wants_otlp = otlp_exporter is not None or (
            v.get("OTEL_METRICS_EXPORTER", "otlp") != "none"
            and bool(v.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") or v.get("OTEL_EXPORTER_OTLP_ENDPOINT")))
        if not port and not wants_otlp:
            return
        self.profile = ProfileMetrics(v.get("OTEL_PROFILER_RUN_ID") or None, run_id)
        self.sampler = SystemSampler(float(v.get("OTEL_PROFILER_METRICS_INTERVAL_S") or 1.0))
        if port:
            self._start_endpoint(v, port + _local_rank(resource))
        if wants_otlp:
            self._start_otlp(v, resource, otlp_exporter)
        if not self.active:
            self.close()
            return
        self.sampler.start()

    def _start_endpoint(self, v: dict[str, Any], port: int) -> None:
        from prometheus_client.registry import CollectorRegistry

        from .prometheus import Endpoint, PointsCollector

        registry = CollectorRegistry(auto_describe=False)
        self.collector = PointsCollector([self.points])
        registry.register(self.collector)
        self.endpoint = Endpoint.start(registry, v.get("OTEL_PROFILER_PROMETHEUS_HOST") or "127.0.0.1", port,
                                       v.get("OTEL_PROFILER_PROMETHEUS_CERT_FILE") or "",
                                       v.get("OTEL_PROFILER_PROMETHEUS_KEY_FILE") or "",
                                       v.get("OTEL_PROFILER_PROMETHEUS_BASIC_AUTH") or "", warn=warn)

    def _start_otlp(self, v: dict[str, Any], resource: dict[str, Any], exporter: Any) -> None:
        try:
            from .metrics_otlp import OtlpMetrics

            self.otlp = OtlpMetrics.start(v, resource, self._cached_points, exporter)
        except Exception as exc:
            warn(f"OTLP metrics are off ({type(exc).__name__}: {exc})")
            self.otlp = None
        if self.otlp is not None:
            self.profile.listeners.append(self.otlp.record)

    # ------------------------------------------------------------------ data
    def observe_batch(self, batch: Any, meta: dict[str, Any] | None = None) -> None:
        """Fold one flushed EventBatch (and its rank metadata, for trace ids) into the metrics."""
        if self.profile is None:
            return
        try:
            self.profile.observe(batch, meta)
        except Exception as exc:
            warn(f"profile-derived metrics skipped a batch ({type(exc).__name__}: {exc})")

    def watch(self, counters: Callable[[], dict]) -> None:
        """Expose the ``*dropped*`` entries of a counters function (e.g. ``Exporter.counters``) as
        ``otel_profiler.events.dropped{otel_profiler.reason="export_<name>"}``."""
        self._watched.append(counters)

    def points(self) -> list[Point]:
        """Every current point: latest system sample, profile-derived state, overhead, drops."""
        out: list[Point] = []
        if self.sampler is not None:
            out += self.sampler.points()
            out.append(Point(m.OVERHEAD, {"otel_profiler.component": "sampler"}, self.sampler.cpu_seconds))
        if self.profile is not None:
            out += self.profile.points()
        for counters in self._watched:
            try:
                for key, value in counters().items():
                    if "dropped" in key:
                        out.append(Point(m.DROPPED, {"otel_profiler.reason": f"export_{key}"}, float(value)))
            except Exception:
                pass
        return out

    def _cached_points(self) -> list[Point]:
        """Points for the OTLP callbacks: one computation per export, shared by every instrument."""
        stamp, points = self._cache
        if time.monotonic() - stamp > 0.5:
            points = self.points()
            self._cache = (time.monotonic(), points)
        return points

    def close(self) -> None:
        """Stop the sampler, the endpoint and OTLP (a last export). Idempotent, never raises."""
        for part in ("otlp", "endpoint", "sampler"):
            obj = getattr(self, part)
            setattr(self, part, None)
            if obj is not None:
                try:
                    obj.close()
                except Exception:
                    pass


def _local_rank(resource: dict[str, Any]) -> int:
    try:
        return int(resource["ml.local_rank"])
    except (KeyError, TypeError, ValueError):
        from .resource import distributed_position

        return distributed_position()["local_rank"]
