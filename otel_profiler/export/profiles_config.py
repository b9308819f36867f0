"""Where OpenTelemetry profiles go, light enough for the training process (no protobuf): the
profiles target beside the spans' OTLP target, and what the exporter process needs to send them
(``export.profiles_otlp`` encodes and sends)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable
from urllib.parse import urlsplit, urlunsplit

from ..profiler_warnings import print_warning
from ..spans.options import SpanOptions
from ..shared.otlp_target import OtlpTarget

HTTP_PATH = "/v1development/profiles"
"""Where an OTLP/HTTP receiver takes profiles."""
VERSION_HEADER = "otlp-profiles-development-version"
DEVELOPMENT_VERSION = "1"
"""The development version of the profiles messages written (sent in ``VERSION_HEADER``)."""


def profiles_target(traces: OtlpTarget) -> OtlpTarget:
    """The profiles target beside the spans' ``traces`` target: the same endpoint (HTTP: the path
    ``/v1/traces`` becomes ``/v1development/profiles``; OTLP/JSON is sent as protobuf) with the
    development-version header."""
    endpoint, protocol = traces.endpoint, traces.protocol
    if protocol != "grpc":
        parts = urlsplit(endpoint)
        path = parts.path
        path = path[:-len("/v1/traces")] + HTTP_PATH if path.endswith("/v1/traces") else HTTP_PATH
        endpoint, protocol = urlunsplit(parts._replace(path=path)), "http/protobuf"
    return replace(traces, endpoint=endpoint, protocol=protocol, signal="profiles",
                   headers={**traces.headers, VERSION_HEADER: DEVELOPMENT_VERSION})


@dataclass
class ProfilesConfig:
    """What the exporter process needs to send profiles (picklable)."""

    target: OtlpTarget
    options: SpanOptions = field(default_factory=SpanOptions)
    retry_s: float = 30.0
    probe_s: float = 5.0


def profiles_config(settings: Any, spans: Any) -> ProfilesConfig | None:
    """What the exporter process needs to send profiles beside the spans (``spans``: the span
    pipeline's ``ExportConfig``): when ``OTEL_PROFILER_PROFILES_EXPORTER=otlp`` and there is an OTLP
    traces endpoint, else None (with one warning when there is no endpoint)."""
    if settings["OTEL_PROFILER_PROFILES_EXPORTER"] != "otlp":
        return None
    if spans.target is None:
        print_warning("OTEL_PROFILER_PROFILES_EXPORTER=otlp: no OTLP traces endpoint is set, so no "
                      "profiles are sent")
        return None
    return ProfilesConfig(profiles_target(spans.target), spans.span_options, spans.retry_s, spans.probe_s)


def open_sender(config: ProfilesConfig | None, warn: Callable[[str], None],
                network_deadline: Callable[[], float | None]) -> Any:
    """In the exporter process: the threaded ``profiles_otlp.ProfilesSender`` of ``config``, else
    one that does nothing (profiles off, or it cannot start: one warning)."""
    if config is None:
        return NoProfiles()
    try:
        from .profiles_otlp import ProfilesSender

        return ProfilesSender(config, warn, threaded=True, closing_deadline=network_deadline)
    except Exception as exc:
        warn(f"profiles exporter cannot start ({exc.__class__.__name__}: {exc}); profiles are not sent")
        return NoProfiles()


class NoProfiles:
    """The sender while profiles are off."""

    def handle_safely(self, meta: Any, batch: Any) -> None:
        pass

    def close_and_report(self, network_deadline: float | None) -> None:
        pass
