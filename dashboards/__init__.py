"""Grafana dashboards, generated from Python with grafana-foundation-sdk. They ship, with the deployment
files of a ready observability stack (Prometheus, an OpenTelemetry Collector, Jaeger and Grafana), in
``otel_profiler/stack/``; ``otel-profiler stack --output DIR`` writes that folder out.

``python -m dashboards.generate`` writes ``otel_profiler/stack/grafana/*.json``; ``--check`` fails when the
committed JSON differs from what the source generates.
"""
