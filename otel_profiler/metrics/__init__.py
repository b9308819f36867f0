"""Metrics: the catalogue (points), system and profile samplers, the Prometheus endpoint and the publisher."""
