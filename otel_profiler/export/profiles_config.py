"""Profiles in the exporter, light enough for the training process (no protobuf): whether the
settings ask for them (``profiles_config``) and, in the exporter process, the sender
(``open_sender``: ``export.profiles_otlp`` encodes and sends). Where they go is
``export.profiles_target``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol

from cuda_tracer.model.events import EventBatch

from ..config import Settings
from ..profiler_warnings import print_warning
from .profiles_target import ProfilesConfig, profiles_target

if TYPE_CHECKING:
    from .export_config import ExportConfig


class ProfilesSink(Protocol):
    """Where the exporter process hands each batch for profiles, and what it settles at close."""

    def handle_safely(self, meta: dict[str, Any], batch: EventBatch) -> None: ...

    def close_and_report(self, network_deadline: float | None) -> None: ...


def profiles_config(settings: Settings, spans: ExportConfig) -> ProfilesConfig | None:
    """What the exporter process needs to send profiles beside the spans (``spans``: the span
    pipeline's ``ExportConfig``): when ``OTEL_PROFILER_PROFILES_EXPORTER=otlp`` and there is an OTLP
    traces endpoint, else None (with one warning when there is no endpoint)."""
    if settings.profiles_exporter != "otlp":
        return None
    if spans.target is None:
        print_warning("OTEL_PROFILER_PROFILES_EXPORTER=otlp: no OTLP traces endpoint is set, so no "
                      "profiles are sent")
        return None
    return ProfilesConfig(profiles_target(spans.target), spans.span_options, spans.retry_s, spans.probe_s)


def open_sender(config: ProfilesConfig | None, warn: Callable[[str], None],
                network_deadline: Callable[[], float | None]) -> ProfilesSink:
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

    def handle_safely(self, meta: dict[str, Any], batch: EventBatch) -> None:
        pass

    def close_and_report(self, network_deadline: float | None) -> None:
        pass
