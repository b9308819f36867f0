"""Grafana dashboards (generated from Python with grafana-foundation-sdk) and the deployment files of a
ready observability stack: Prometheus, an OpenTelemetry Collector, Jaeger and Grafana.

``python -m dashboards.generate`` writes ``dashboards/grafana/*.json``; ``--check`` fails when the
committed JSON differs from what the source generates.
"""
