"""The one rule for a service's name, as OpenTelemetry's SDKs apply it: ``OTEL_SERVICE_NAME`` first,
then ``service.name`` in ``OTEL_RESOURCE_ATTRIBUTES``, then the caller's defaults in order (the
training script's name, a name a profile recorded, a command's own name)."""

from __future__ import annotations

from typing import Any, Mapping

LAST_RESORT = "otel-profiler"
"""The name when nothing else gives one."""


def service_name(otel_service_name: str | None, resource_attributes: Mapping[str, Any] | None,
                 *defaults: str | None) -> str:
    """The first non-empty of ``otel_service_name``, ``resource_attributes["service.name"]`` and
    ``defaults``; ``LAST_RESORT`` when all are empty."""
    for name in (otel_service_name, (resource_attributes or {}).get("service.name"), *defaults):
        if name:
            return str(name)
    return LAST_RESORT
