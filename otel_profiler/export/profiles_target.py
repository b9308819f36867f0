"""Where OpenTelemetry profiles go and what a sender of them needs, light enough for the training
process (no protobuf): the profiles target beside the spans' OTLP target, and ``ProfilesConfig``.
Shared by ``profiles_config`` (the exporter's side: whether the settings ask for profiles, and the
sender), ``profiles_otlp`` (encoding and sending) and ``otel-profiler export --format otlp-profiles``."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit, urlunsplit

from ..shared.otlp_target import OtlpTarget
from ..spans.options import SpanOptions

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
