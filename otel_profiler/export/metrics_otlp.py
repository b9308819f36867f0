"""A ``MetricsSnapshot`` → an OTLP ``ExportMetricsServiceRequest`` (protobuf bytes).

Runs in the exporter process (``otel_profiler.export.exporter``), which sends the request to the metrics
endpoint: the training process only hands over a snapshot of its points every
``OTEL_METRIC_EXPORT_INTERVAL`` ms, so no OpenTelemetry SDK, protobuf or network work happens there.

Mapping (OTLP metrics data model, cumulative temporality throughout, since every point already holds
the total since the process's metrics started):

- gauge → ``Gauge``; counter → monotonic ``Sum``; up-down counter → non-monotonic ``Sum``;
- histogram → ``Histogram`` with the catalogue's explicit bounds, per-bucket counts, count and sum,
  and per bucket the exemplar of its latest observation that had one: the step's trace id and root
  span id, exactly the ids of the exported ``train.step`` span, so a slow step links to its trace.
"""

from __future__ import annotations

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.metrics.v1 import metrics_pb2

from ..metrics import points as m
from ..metrics.points import HistogramValue, MetricsSnapshot, Point
from .otlp import key_value
from ..shared.ids import root_span_id

SCOPE = "otel_profiler"
_CUMULATIVE = metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE


def encode_metrics(snapshot: MetricsSnapshot, scope_version: str = "") -> bytes:
    """One request with every point of the snapshot, one ``Metric`` per catalogue entry."""
    request = ExportMetricsServiceRequest()
    resource_metrics = request.resource_metrics.add()
    _attributes(resource_metrics.resource.attributes, snapshot.resource)
    scope_metrics = resource_metrics.scope_metrics.add()
    scope_metrics.scope.name = SCOPE
    scope_metrics.scope.version = scope_version
    by_name: dict[str, list[Point]] = {}
    for point in snapshot.points:
        by_name.setdefault(point.spec.name, []).append(point)
    for points in by_name.values():
        spec = points[0].spec
        metric = scope_metrics.metrics.add(name=spec.name, unit=spec.unit, description=spec.doc)
        if spec.kind == m.GAUGE:
            for p in points:
                _number(metric.gauge.data_points.add(), p, None, snapshot.time_ns)
        elif spec.kind in (m.COUNTER, m.UPDOWN):
            metric.sum.aggregation_temporality = _CUMULATIVE
            metric.sum.is_monotonic = spec.kind == m.COUNTER
            for p in points:
                _number(metric.sum.data_points.add(), p, snapshot.start_ns, snapshot.time_ns)
        else:
            metric.histogram.aggregation_temporality = _CUMULATIVE
            for p in points:
                _histogram(metric.histogram.data_points.add(), p, snapshot.start_ns, snapshot.time_ns)
    return request.SerializeToString()


def _attributes(repeated, attributes: dict) -> None:
    for key, value in attributes.items():
        repeated.add().MergeFromString(key_value(str(key), value))


def _number(dp, point: Point, start_ns: int | None, time_ns: int) -> None:
    _attributes(dp.attributes, point.attributes)
    if start_ns is not None:
        dp.start_time_unix_nano = start_ns
    dp.time_unix_nano = time_ns
    dp.as_double = float(point.value)


def _histogram(dp, point: Point, start_ns: int, time_ns: int) -> None:
    h: HistogramValue = point.value
    _attributes(dp.attributes, point.attributes)
    dp.start_time_unix_nano, dp.time_unix_nano = start_ns, time_ns
    dp.count, dp.sum = h.count, h.total
    dp.explicit_bounds.extend(h.bounds)
    dp.bucket_counts.extend(h.counts)
    for exemplar in h.exemplars:
        if exemplar is None:
            continue
        trace_hex, value, unix_s = exemplar
        trace = int(trace_hex, 16)
        e = dp.exemplars.add()
        e.trace_id = trace.to_bytes(16, "big")
        e.span_id = root_span_id(trace >> 64, trace & (2**64 - 1)).to_bytes(8, "big")
        e.as_double = value
        e.time_unix_nano = int(unix_s * 1e9)
