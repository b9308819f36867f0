"""OTLP metrics in the exporter process: this package's encoder (``export/metrics_otlp.py``) against the
OpenTelemetry SDK metrics pipeline with ``opentelemetry-exporter-otlp``'s encoder, side by side in one run.

- Import: a fresh ``python -c "import ..."`` of each on top of what the exporter process imports for
  spans anyway, interleaved with that alone (``--runs`` triples); the median of each minus the
  median of that alone is what the exporter process's start would pay for metrics.
- Per export, in process, no network on either side (the sending is the same HTTP or gRPC request):
  ours encodes one ``MetricsSnapshot`` (every series of the catalogue, one attribute set each,
  histograms with their exemplars); the SDK turns the same snapshot into instrument calls (gauge
  ``set``, counter ``add`` of the increase, one histogram ``record``), collects
  (``InMemoryMetricReader``) and encodes (``encode_metrics``) into the same protobuf request.

Prints medians and the ratio SDK / ours.

    python benchmarks/metrics_sdk_cost.py [--runs 15] [--exports 300]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

BASE_IMPORT = "import otel_profiler.export.pipeline, otel_profiler.export.otlp, otel_profiler.export.delivery"
"""What the exporter process imports for spans anyway."""
OURS_IMPORT = BASE_IMPORT + "; import otel_profiler.export.metrics_otlp"
SDK_IMPORT = BASE_IMPORT + ("; import opentelemetry.sdk.metrics, opentelemetry.sdk.metrics.export; "
                            "import opentelemetry.exporter.otlp.proto.http.metric_exporter")


def import_ms(runs: int) -> dict[str, float]:
    times: dict[str, list[float]] = {"bare": [], "ours": [], "sdk": []}
    for _ in range(runs):
        for name, code in (("bare", BASE_IMPORT), ("ours", OURS_IMPORT), ("sdk", SDK_IMPORT)):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True)
            times[name].append((time.perf_counter() - t0) * 1e3)
    bare = statistics.median(times["bare"])
    return {name: statistics.median(v) - bare for name, v in times.items() if name != "bare"}


def snapshot(step: int):
    """Every catalogue series with one attribute set; histograms with one observation per step."""
    from otel_profiler.metrics import points as m
    import otel_profiler.metrics.profile  # noqa: F401  (their catalogue entries)
    import otel_profiler.metrics.system  # noqa: F401

    points = []
    for spec in m.CATALOGUE:
        attrs = {label: "0" for label in spec.labels}
        if spec.kind == m.HISTOGRAM:
            h = m.HistogramValue(tuple(spec.buckets) or (0.1, 1.0, 10.0))
            h.counts[1] = step + 1
            h.total = 0.5 * (step + 1)
            h.exemplars[1] = (f"{step + 1:032x}", 0.5, time.time())
            points.append(m.Point(spec, attrs, h))
        else:
            points.append(m.Point(spec, attrs, float(step)))
    now = time.time_ns()
    return m.MetricsSnapshot({"service.name": "bench"}, points, now - 10**9, now)


def ours_us(exports: int) -> float:
    from otel_profiler.export.metrics_otlp import encode_metrics

    snaps = [snapshot(i) for i in range(exports)]
    times = []
    for s in snaps:
        t0 = time.perf_counter_ns()
        encode_metrics(s, "bench")
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / 1e3


def sdk_us(exports: int) -> float:
    from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.resources import Resource

    from otel_profiler.metrics import points as m

    reader = InMemoryMetricReader()
    meter = MeterProvider([reader], resource=Resource({"service.name": "bench"})).get_meter("otel_profiler")
    instruments: dict[str, object] = {}
    last: dict[str, float] = {}
    snaps = [snapshot(i) for i in range(exports)]
    times = []
    for s in snaps:
        t0 = time.perf_counter_ns()
        for p in s.points:
            spec = p.spec
            inst = instruments.get(spec.name)
            if inst is None:
                make = {m.GAUGE: meter.create_gauge, m.COUNTER: meter.create_counter,
                        m.UPDOWN: meter.create_up_down_counter, m.HISTOGRAM: meter.create_histogram}[spec.kind]
                inst = instruments[spec.name] = make(spec.name, unit=spec.unit, description=spec.doc)
            if spec.kind == m.GAUGE:
                inst.set(p.value, p.attributes)
            elif spec.kind in (m.COUNTER, m.UPDOWN):
                inst.add(p.value - last.get(spec.name, 0.0), p.attributes)
                last[spec.name] = p.value
            else:
                inst.record(0.5, p.attributes)
        encode_metrics(reader.get_metrics_data()).SerializeToString()
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times) / 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--exports", type=int, default=300)
    args = ap.parse_args()
    imports = import_ms(args.runs)
    ours, sdk = ours_us(args.exports), sdk_us(args.exports)
    print(f"import (ms over the span exporter's imports, median of {args.runs}): ours {imports['ours']:.1f}  "
          f"SDK + OTLP metric exporter {imports['sdk']:.1f}  ratio {imports['sdk'] / max(imports['ours'], 1e-9):.1f}x")
    print(f"per export (us, median of {args.exports}): ours {ours:.0f}  SDK {sdk:.0f}  ratio {sdk / ours:.1f}x")


if __name__ == "__main__":
    main()
