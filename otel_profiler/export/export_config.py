"""What an export needs, built one way from the settings: :class:`ExportConfig` (targets, files,
spool, retry, span options; picklable, so the exporter process gets it whole) and
:func:`export_config_from_settings`, which the live exporter and ``otel-profiler export`` both use."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from ..config import Settings
from ..shared.otlp_target import OtlpTarget
from ..spans.options import SpanOptions, options_from_settings

PROBE_S = 5.0
"""While the endpoint is down: one try per this many seconds."""


@dataclass
class ExportConfig:
    """Everything the exporter process needs (picklable; headers only inside ``target``)."""

    target: OtlpTarget | None = None
    metrics_target: OtlpTarget | None = None
    json_file: str = ""
    pb_file: str = ""
    spool_dir: str = ""
    spool_max_bytes: int = 1024 << 20
    retry_s: float = 30.0
    queue_size: int = 64
    max_request_bytes: int = 3 << 20
    probe_s: float = PROBE_S
    span_options: SpanOptions = field(default_factory=SpanOptions)
    console_spans: bool = False  # OTEL_TRACES_EXPORTER=console: OTLP JSON lines on stdout
    console_metrics: bool = False  # OTEL_METRICS_EXPORTER=console: likewise for metrics

    @property
    def has_span_sink(self) -> bool:
        return bool(self.target or self.json_file or self.pb_file or self.console_spans)

    @property
    def wants_metrics(self) -> bool:
        return self.metrics_target is not None or self.console_metrics

    @property
    def has_sink(self) -> bool:
        return self.has_span_sink or self.wants_metrics


def export_config_from_settings(settings: Settings, default_service: str | None = None,
                                **chosen: Any) -> ExportConfig:
    """The export the settings describe (targets resolved, the spool in the profile folder unless
    ``OTEL_PROFILER_SPOOL_DIR`` says otherwise), with the fields in ``chosen`` set instead (what a
    command's flags choose, e.g. ``target`` or ``json_file``). ``default_service``: the
    ``service.name`` when the settings give none."""
    config = ExportConfig(
        target=settings.traces_target,
        metrics_target=settings.metrics_target,
        json_file=settings.otlp_file,
        spool_dir=os.path.abspath(settings.spool_dir or os.path.join(settings.output_dir, "otlp-spool")),
        spool_max_bytes=settings.spool_max_mb << 20,
        retry_s=settings.export_retry_s,
        queue_size=settings.export_queue,
        span_options=options_from_settings(settings, default_service),
        console_spans="console" in settings.otel_traces_exporter,
        console_metrics="console" in settings.otel_metrics_exporter and settings.metrics)
    return dataclasses.replace(config, **chosen)
