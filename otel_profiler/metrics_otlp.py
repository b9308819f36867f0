"""OTLP metrics through the OpenTelemetry SDK: a MeterProvider with a PeriodicExportingMetricReader
and the OTLP metric exporter (gRPC or HTTP, as ``OTEL_EXPORTER_OTLP[_METRICS]_PROTOCOL`` says).

Gauges, counters and up-down counters are *observable* instruments whose callbacks read the same
latest points the Prometheus endpoint serves, so they cost nothing between exports; histograms are
synchronous instruments fed by ``ProfileMetrics`` listeners, in the session's flush thread. Export
(encoding, network) runs on the reader's own thread every ``OTEL_METRIC_EXPORT_INTERVAL`` ms,
never in a training step. Step-time observations carry the step's trace id as an exemplar (a
sampled, non-recording span context with the trace id and root span id of the exported step).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from . import metric_points as m
from .metric_points import Point


def _endpoint(values: dict[str, Any]) -> tuple[str, str]:
    """(endpoint URL, protocol) for metrics; ("", "") when none is configured."""
    protocol = (values.get("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL")
                or values.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf")
    url = values.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT") or ""
    if not url and values.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        url = values["OTEL_EXPORTER_OTLP_ENDPOINT"]
        if protocol.startswith("http"):
            url = url.rstrip("/") + "/v1/metrics"
    return url, protocol


def _exporter(values: dict[str, Any], url: str, protocol: str) -> Any:
    headers = dict(values.get("OTEL_EXPORTER_OTLP_HEADERS") or {})
    timeout_s = float(values.get("OTEL_EXPORTER_OTLP_TIMEOUT") or 10000) / 1e3
    cert = values.get("OTEL_EXPORTER_OTLP_CERTIFICATE") or None
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        insecure = bool(values.get("OTEL_EXPORTER_OTLP_INSECURE")) or url.startswith("http://")
        return OTLPMetricExporter(endpoint=url, insecure=insecure, headers=headers or None, timeout=timeout_s)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return OTLPMetricExporter(endpoint=url, headers=headers or None, timeout=timeout_s, certificate_file=cert)


class OtlpMetrics:
    """The MeterProvider and its instruments. ``start`` returns None when no endpoint is set."""

    def __init__(self, provider: Any, histograms: dict[str, Any]) -> None:
        self.provider = provider
        self.histograms = histograms

    @classmethod
    def start(cls, values: dict[str, Any], resource_attributes: dict[str, Any],
              points: Callable[[], list[Point]], exporter: Any = None) -> "OtlpMetrics | None":
        """``exporter`` overrides the OTLP exporter (tests pass an in-memory one)."""
        url, protocol = _endpoint(values)
        if exporter is None:
            if not url:
                return None
            exporter = _exporter(values, url, protocol)
        from opentelemetry.metrics import Observation
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics._internal.exemplar import TraceBasedExemplarFilter
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
        from opentelemetry.sdk.resources import Resource

        interval = float(values.get("OTEL_METRIC_EXPORT_INTERVAL") or 60000)
        reader = PeriodicExportingMetricReader(exporter, export_interval_millis=interval)
        views = [View(instrument_name=s.name, aggregation=ExplicitBucketHistogramAggregation(list(s.buckets)))
                 for s in m.CATALOGUE if s.kind == m.HISTOGRAM]
        provider = MeterProvider(metric_readers=[reader], resource=Resource.create(resource_attributes),
                                 views=views, exemplar_filter=TraceBasedExemplarFilter())
        meter = provider.get_meter("otel_profiler")
        histograms: dict[str, Any] = {}

        def callback_for(spec: m.Spec) -> Callable:
            def callback(options: Any) -> list:
                return [Observation(p.value, p.attributes) for p in points() if p.spec is spec]
            return callback

        for spec in m.CATALOGUE:
            make = {m.GAUGE: meter.create_observable_gauge, m.COUNTER: meter.create_observable_counter,
                    m.UPDOWN: meter.create_observable_up_down_counter}.get(spec.kind)
            if make is not None:
                make(spec.name, callbacks=[callback_for(spec)], unit=spec.unit, description=spec.doc)
            else:
                histograms[spec.name] = meter.create_histogram(spec.name, unit=spec.unit, description=spec.doc)
        return cls(provider, histograms)

    def record(self, spec: m.Spec, attributes: dict, seconds: np.ndarray, exemplars: list) -> None:
        """ProfileMetrics listener: record histogram values (exemplars: [(index, trace_id_hex)])."""
        histogram = self.histograms.get(spec.name)
        if histogram is None:
            return
        contexts = {i: _step_context(t) for i, t in exemplars}
        for i, value in enumerate(seconds.tolist()):
            histogram.record(value, attributes, context=contexts.get(i))

    def close(self) -> None:
        try:
            self.provider.shutdown(timeout_millis=5000)
        except Exception:
            pass


def _step_context(trace_hex: str) -> Any:
    """A context whose current span is the (sampled) root span of the exported step trace."""
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    from .spans import root_span_id

    tid = int(trace_hex, 16)
    root = root_span_id(tid >> 64, tid & (2**64 - 1))
    ctx = SpanContext(tid, root, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    return trace.set_span_in_context(NonRecordingSpan(ctx))
