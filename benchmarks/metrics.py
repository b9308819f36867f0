"""Cost of metrics: one sampler tick, one scrape, one batch aggregation, as CPU time and as a fraction
of one core at the default interval (1 s sampling; scrapes every 1 s and every 15 s).

``python benchmarks/metrics.py [--ticks N] [--scrapes N]``. Target: sampler + scrape under 0.5 % of a
core. The scrape is measured twice: the exposition alone (collect + OpenMetrics formatting, thread
CPU time) and a full HTTP GET against the live endpoint in this process (process CPU time, so it
also counts the client: an upper bound). The registry holds every CPU series plus the profile-derived
series of a real GPU trace (tests/data/traces) (histograms with exemplars), as a real job would.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from cuda_tracer.loading import load_profile  # noqa: E402
from otel_profiler import config  # noqa: E402
from otel_profiler.metrics.publisher import MetricsService  # noqa: E402

TRACE = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "traces", "hta",
                     "nccl_parser_config", "nccl_data.json.gz")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ticks", type=int, default=300)
    ap.add_argument("--scrapes", type=int, default=200)
    args = ap.parse_args()

    with open(os.devnull, "w") as null:  # keep the one NVML info line out of the figures' output
        saved, sys.stderr = sys.stderr, null
        try:
            from otel_profiler.metrics.system import SystemSampler

            sampler = SystemSampler(1.0)
        finally:
            sys.stderr = saved
    interval = 1.0

    # Sampler tick.
    sampler.tick()
    per_tick = []
    for _ in range(args.ticks):
        t0 = time.thread_time()
        sampler.tick()
        per_tick.append(time.thread_time() - t0)
    tick = statistics.median(per_tick)
    print(f"sampler tick ({'NVML + ' if sampler.has_gpu else ''}psutil, {len(sampler.points())} points): "
          f"median {tick * 1e6:.0f} µs CPU = {100 * tick / interval:.3f} % of one core at {interval:g} s")
    sampler.close()

    # Profile aggregation of one batch.
    rank = load_profile([TRACE]).ranks[0]
    port_settings = config.load({"OTEL_PROFILER_PROMETHEUS_PORT": str(_free_port()), "OTEL_PROFILER_RUN_ID": "bench"})
    with open(os.devnull, "w") as null:
        saved, sys.stderr = sys.stderr, null
        try:
            service = MetricsService().start(port_settings, {"ml.local_rank": 0})
        finally:
            sys.stderr = saved
    t0 = time.thread_time()
    service.observe_batch(rank.batch, rank.meta)
    agg = time.thread_time() - t0
    print(f"profile aggregation: {len(rank.batch)} events in {agg * 1e3:.1f} ms CPU "
          f"({agg / len(rank.batch) * 1e9:.0f} ns/event; in the session's flush thread)")

    # Scrape: exposition alone, then full HTTP GETs.
    from prometheus_client.openmetrics.exposition import generate_latest

    expo = []
    for _ in range(args.scrapes):
        t0 = time.thread_time()
        body = generate_latest(_registry(service))
        expo.append(time.thread_time() - t0)
    exposition = statistics.median(expo)
    req = urllib.request.Request(service.url, headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    t0 = time.process_time()
    for _ in range(args.scrapes):
        with urllib.request.urlopen(req) as r:
            r.read()
    http = (time.process_time() - t0) / args.scrapes
    lines = body.count(b"\n")
    print(f"scrape ({len(body)} bytes, {lines} lines): exposition median {exposition * 1e6:.0f} µs CPU; "
          f"HTTP GET incl. client {http * 1e6:.0f} µs CPU")
    for every in (1.0, 15.0):
        print(f"  scraped every {every:g} s: {100 * http / every:.3f} % of one core (upper bound)")
    total = tick / interval + http / 1.0
    print(f"total at 1 s sampling + 1 s scrapes: {100 * total:.3f} % of one core (target < 0.5 %)")
    _otlp_handoff(service, rank)
    service.close()


def _otlp_handoff(service: MetricsService, rank) -> None:
    """OTLP metrics cost the training process one snapshot per export, pickled onto the exporter's
    queue; the alternative, OpenTelemetry SDK instruments in the training process, costs one
    ``Histogram.record`` per launch delay and latency value of every batch (measured side by side)."""
    import pickle

    from cuda_tracer.model.correlate import correlate
    from otel_profiler.metrics.points import MetricsSnapshot

    per_export = []
    for _ in range(50):
        t0 = time.thread_time()
        snapshot = MetricsSnapshot({"service.name": "bench"}, service.points(), 0, time.time_ns())
        pickle.dumps(snapshot)
        per_export.append(time.thread_time() - t0)
    handoff = statistics.median(per_export)
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    histogram = MeterProvider(metric_readers=[InMemoryMetricReader()]).get_meter("bench").create_histogram("d")
    corr = correlate(rank.batch)
    values = (list(corr.delay_ns[corr.matched] / 1e9) + list(corr.latency_ns[corr.matched] / 1e9))
    attrs = {"otel_profiler.rank": 0}
    t0 = time.thread_time()
    for value in values:
        histogram.record(value, attrs)
    sdk = time.thread_time() - t0
    print(f"OTLP metrics hand-off per export ({len(snapshot.points)} points, snapshot + pickle): median "
          f"{handoff * 1e6:.0f} µs CPU = {100 * handoff / 60:.4f} % of one core at the 60 s default")
    print(f"  vs OpenTelemetry SDK histograms for the same batch: {len(values)} record() calls "
          f"{sdk * 1e3:.1f} ms CPU, {sdk / handoff:.0f}x one hand-off, every batch")


def _registry(service: MetricsService):
    from prometheus_client.registry import CollectorRegistry

    reg = CollectorRegistry(auto_describe=False)
    reg.register(service.collector)
    return reg


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    main()
