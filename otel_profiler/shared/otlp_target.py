"""Where each signal goes over OTLP: the standard ``OTEL_EXPORTER_OTLP_*`` variables resolved into an
:class:`OtlpTarget` (``config.load`` resolves them once; the ``export`` and ``replay`` commands again
for their ``--endpoint``/``--protocol`` flags), what an endpoint may be, and how an endpoint or a
receiver's text may be shown. The network clients that send to a target are ``export.sinks``.

Rules (OTLP exporter specification):

- One target per signal (traces, metrics). A signal's own variable (``TRACES_``, ``METRICS_``) wins
  over the general one; ``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER`` without ``otlp`` turn
  that signal's OTLP export off.
- HTTP: ``OTEL_EXPORTER_OTLP_ENDPOINT`` gets ``/v1/traces`` or ``/v1/metrics`` appended; a signal's
  own endpoint is used as is. gRPC: ``http://`` means plaintext, ``https://`` TLS; without a scheme TLS unless
  ``OTEL_EXPORTER_OTLP_INSECURE`` is true.
- Header values are never logged: errors name the header key at most. A receiver's reply (body,
  status text, gRPC details) is never shown as is: :func:`safe_text` keeps a short, printable
  ASCII excerpt of the status text only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping
from urllib.parse import urlsplit

PROTOCOLS = ("grpc", "http/protobuf", "http/json")


@dataclass
class OtlpTarget:
    """A resolved OTLP destination of one signal. ``describe()`` is safe to log (no header values)."""

    endpoint: str
    protocol: str = "http/protobuf"
    headers: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 10.0
    compression: str = "none"
    certificate: str = ""
    client_key: str = ""
    client_certificate: str = ""
    insecure: bool = False
    signal: str = "traces"  # or "metrics"

    def describe(self) -> str:
        """Protocol, endpoint and header names; credentials in the URL (user info, query) hidden."""
        keys = f", headers: {', '.join(sorted(self.headers))}" if self.headers else ""
        return f"OTLP {self.protocol} {redact_url(self.endpoint)}{keys}"


def redact_url(url: str) -> str:
    """``url`` without what may be a secret: ``user:password@`` and the query become ``***``."""
    try:
        parts = urlsplit(url if "://" in url else "//" + url)
    except ValueError:
        return "(unparsable endpoint)"
    host = parts.netloc.rpartition("@")[2]
    netloc = f"***@{host}" if "@" in parts.netloc else host
    text = (f"{parts.scheme}://" if parts.scheme else "") + netloc + parts.path
    return text + ("?***" if parts.query else "")


def safe_text(text: object, limit: int = 60) -> str:
    """``text`` reduced to printable ASCII (no escape sequences, no newlines), at most ``limit``
    characters: what a receiver or a network error says may be shown only like this."""
    cleaned = "".join(c if " " <= c <= "~" else " " for c in str(text))
    cleaned = " ".join(cleaned.split())
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 3] + "..."


def _pick(values: Mapping[str, Any], signal: str, name: str) -> Any:
    specific = values.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_{name}")
    return specific if specific is not None else values.get(f"OTEL_EXPORTER_OTLP_{name}")


def http_signal_url(base: str, signal: str = "traces") -> str:
    """``base`` + ``/v1/traces`` or ``/v1/metrics`` (the OTLP/HTTP rule for the general endpoint)."""
    return base.rstrip("/") + f"/v1/{signal}"


def resolve_target(values: Mapping[str, Any], endpoint: str | None = None, protocol: str | None = None,
                   signal: str = "traces") -> OtlpTarget | None:
    """The target of ``signal`` ("traces" or "metrics") from the settings' values by variable name
    (``config.Settings.values``; ``config.load`` resolves both signals once; the commands call it
    again only for their ``--endpoint``/``--protocol`` flags, which override the variables). None
    when no endpoint is configured, or for metrics when ``OTEL_METRICS_EXPORTER`` is ``none``."""
    if not endpoint and "otlp" not in values.get(f"OTEL_{signal.upper()}_EXPORTER", ("otlp",)):
        return None  # OTEL_TRACES_EXPORTER / OTEL_METRICS_EXPORTER without otlp
    proto = protocol or _pick(values, signal, "PROTOCOL") or "http/protobuf"
    specific = values.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT")
    url: str | None
    if endpoint:
        url = endpoint
        if proto != "grpc" and urlsplit(url).path in ("", "/"):
            url = http_signal_url(url, signal)
    elif specific is not None:  # "" (unset in a file of settings) falls back to the general one
        if specific == INVALID_ENDPOINT:
            return None
        url = specific if specific else None
    else:
        url = None
    if url is None:
        base = values.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        if not base or base == INVALID_ENDPOINT:
            return None
        url = base if proto == "grpc" else http_signal_url(base, signal)
    timeout_ms = _pick(values, signal, "TIMEOUT")
    insecure = _pick(values, signal, "INSECURE")
    return OtlpTarget(
        endpoint=url, protocol=proto, headers=dict(_pick(values, signal, "HEADERS") or {}),
        timeout_s=(timeout_ms if timeout_ms is not None else 10000) / 1000.0,
        compression=_pick(values, signal, "COMPRESSION") or "none",
        certificate=_pick(values, signal, "CERTIFICATE") or "",
        client_key=_pick(values, signal, "CLIENT_KEY") or "",
        client_certificate=_pick(values, signal, "CLIENT_CERTIFICATE") or "",
        insecure=bool(insecure), signal=signal)


INVALID_ENDPOINT = "(invalid)"
"""What ``config.load`` keeps for an endpoint variable it rejected: that signal is not exported."""


def endpoint_problem(url: str) -> str | None:
    """Why ``url`` cannot be an OTLP endpoint, or None. An endpoint is an ``http://`` or
    ``https://`` URL with a host (and a valid port), or ``host:port`` (gRPC without a scheme)."""
    text = url.strip()
    if not text:
        return "empty"
    if any(c.isspace() or not c.isprintable() for c in text):
        return "expected a URL such as http://localhost:4318 (no spaces)"
    try:
        parts = urlsplit(text if "://" in text else "//" + text)
        port = parts.port
    except ValueError as exc:
        return f"expected a URL such as http://localhost:4318 ({safe_text(str(exc), 40)})"
    if "://" in text and parts.scheme.lower() not in ("http", "https"):
        return "expected an http:// or https:// URL"
    if not parts.hostname:
        return "expected a URL with a host, such as http://localhost:4318"
    if "://" not in text and port is None:
        return "expected an http:// or https:// URL, or host:port"
    return None
