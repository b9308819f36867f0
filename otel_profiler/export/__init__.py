"""Delivery of spans and metrics: the exporter process, the OTLP encoder, the pipeline, delivery and its sinks."""
