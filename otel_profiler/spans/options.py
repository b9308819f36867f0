"""How spans are built: the span model's options (``SpanOptions``, whose defaults are the settings'
defaults too) and how they come from the settings (``options_from_settings``). Shared by the span
model (``build``), its attributes (``attributes``) and the exporter."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..shared.span_defaults import DEFAULT_SPAN_BUDGET, DEFAULT_WINDOW_NS

if TYPE_CHECKING:
    from ..config.settings import Settings


@dataclass
class SpanOptions:
    """How spans are built. ``run_id`` None: ``meta['run_id']``, else derived from the metadata."""

    budget: int = DEFAULT_SPAN_BUDGET
    window_ns: int = DEFAULT_WINDOW_NS
    run_id: str | None = None
    service_name: str | None = None
    resource_attributes: dict[str, Any] = field(default_factory=dict)
    top_kernels: int = 5
    default_service: str | None = None


def options_from_settings(settings: Settings, default_service: str | None = None) -> SpanOptions:
    """SpanOptions from the settings (``config.Settings``: budget, window, run id, service,
    resource attributes).

    The service name is ``OTEL_SERVICE_NAME``, else ``service.name`` of ``OTEL_RESOURCE_ATTRIBUTES``,
    else ``default_service`` (the training process passes its script name).
    """
    return SpanOptions(
        budget=settings.span_budget,
        window_ns=int(settings.span_window_s * 1e9),
        run_id=settings.run_id or None,
        service_name=settings.otel_service_name or None,
        resource_attributes=dict(settings.otel_resource_attributes),
        default_service=default_service,
    )
