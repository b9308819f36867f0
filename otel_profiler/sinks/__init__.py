"""Where encoded OTLP requests go: an OTLP/gRPC or OTLP/HTTP endpoint, a file, or the spool.

This package's ``__init__`` is light (no grpc, no protobuf): it resolves the standard
``OTEL_EXPORTER_OTLP_*`` variables into an :class:`OtlpTarget` and holds the delivery loop with
retries and backoff. The network clients live in ``grpc_sink`` and ``http_sink`` and are imported
only by :func:`open_sink`, i.e. in the exporter process or the CLI.

Rules (OTLP exporter specification):

- One target per signal (traces, metrics). A signal's own variable (``TRACES_``, ``METRICS_``) wins
  over the general one; ``OTEL_TRACES_EXPORTER`` / ``OTEL_METRICS_EXPORTER`` without ``otlp`` turn
  that signal's OTLP export off.
- HTTP: ``OTEL_EXPORTER_OTLP_ENDPOINT`` gets ``/v1/traces`` or ``/v1/metrics`` appended; a signal's
  own endpoint is used as is. gRPC: ``http://`` means plaintext, ``https://`` TLS; without a scheme TLS unless
  ``OTEL_EXPORTER_OTLP_INSECURE`` is true.
- Retryable: gRPC UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ABORTED, CANCELLED,
  OUT_OF_RANGE, DATA_LOSS; HTTP 429, 502, 503, 504 and connection failures. Everything else is
  final: the request is dropped with one warning per distinct reason.
- Header values are never logged: errors name the header key at most.
- No attempt outlives a ``deadline`` (closing): its timeout is cut to the time left, and a request
  cut short is retryable, so it is spooled (a receiver that took it anyway gets it twice after
  ``replay``: at least once, never lost).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol
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


@dataclass
class Result:
    """Outcome of one send. ``retryable`` failures are retried, then spooled."""

    ok: bool
    retryable: bool = False
    message: str = ""
    retry_after_s: float | None = None
    rejected: int = 0  # spans or data points the receiver refused (partial success)


OK = Result(True)


class Sink(Protocol):
    def send(self, request: bytes, timeout_s: float | None = None) -> Result:
        """One attempt, waiting at most ``timeout_s`` (never more than the target's timeout)."""
        ...

    def close(self) -> None: ...


def _pick(values: dict[str, Any], signal: str, name: str) -> Any:
    specific = values.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_{name}")
    return specific if specific is not None else values.get(f"OTEL_EXPORTER_OTLP_{name}")


def http_signal_url(base: str, signal: str = "traces") -> str:
    """``base`` + ``/v1/traces`` or ``/v1/metrics`` (the OTLP/HTTP rule for the general endpoint)."""
    return base.rstrip("/") + f"/v1/{signal}"


def resolve_target(values: dict[str, Any], endpoint: str | None = None, protocol: str | None = None,
                   warn: Callable[[str], None] | None = None,
                   signal: str = "traces") -> OtlpTarget | None:
    """The target of ``signal`` ("traces" or "metrics") from settings values
    (``config.load().values``); ``endpoint``/``protocol`` (command-line flags) override them. None
    when no endpoint is configured, or for metrics when ``OTEL_METRICS_EXPORTER`` is ``none``."""
    if not endpoint and "otlp" not in values.get(f"OTEL_{signal.upper()}_EXPORTER", ("otlp",)):
        return None  # OTEL_TRACES_EXPORTER / OTEL_METRICS_EXPORTER without otlp
    proto = protocol or _pick(values, signal, "PROTOCOL") or "http/protobuf"
    specific = values.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT")
    if endpoint:
        url = endpoint
        if proto != "grpc" and urlsplit(url).path in ("", "/"):
            url = http_signal_url(url, signal)
    elif specific:
        url = specific
    elif values.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        base = values["OTEL_EXPORTER_OTLP_ENDPOINT"]
        url = base if proto == "grpc" else http_signal_url(base, signal)
    else:
        return None
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


def open_sink(target: OtlpTarget) -> Sink:
    """A network sink for ``target`` (imports grpc or http.client only now)."""
    if target.protocol == "grpc":
        from .grpc_sink import GrpcSink

        return GrpcSink(target)
    if target.protocol == "http/json":
        from .http_json_sink import HttpJsonSink

        return HttpJsonSink(target)
    from .http_sink import HttpSink

    return HttpSink(target)


def deliver(sink: Sink, request: bytes, retry_s: float, deadline: float | None = None,
            sleep: Callable[[float], None] = time.sleep) -> tuple[Result, int]:
    """Send with exponential backoff (0.25 s doubling, at most 8 s per wait) for up to ``retry_s``
    seconds and never past ``deadline`` (``time.monotonic()``). Returns the last result and the
    number of failed attempts."""
    give_up = time.monotonic() + retry_s
    if deadline is not None:
        give_up = min(give_up, deadline)
    wait, failures = 0.25, 0
    while True:
        left = None if deadline is None else max(0.05, deadline - time.monotonic())
        result = sink.send(request, left)
        if result.ok or not result.retryable:
            return result, failures
        failures += 1
        pause = min(result.retry_after_s if result.retry_after_s is not None else wait, 8.0)
        if time.monotonic() + pause >= give_up:
            return result, failures
        sleep(pause)
        wait = min(wait * 2, 8.0)
