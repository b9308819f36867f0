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
- Retryable (retried with backoff, then spooled): gRPC UNAVAILABLE, DEADLINE_EXCEEDED,
  RESOURCE_EXHAUSTED, ABORTED, CANCELLED, OUT_OF_RANGE, DATA_LOSS; HTTP 429, 502, 503, 504 and
  connection failures. Not retried but kept (spooled at once, for ``replay``): the server's own
  failures, HTTP 500, 501 and every other 5xx, gRPC INTERNAL, UNKNOWN, UNIMPLEMENTED. Everything
  else (HTTP 4xx, gRPC INVALID_ARGUMENT, UNAUTHENTICATED, PERMISSION_DENIED, TLS errors) is final:
  the request is dropped and counted, with one warning per distinct reason.
- Header values are never logged: errors name the header key at most. A receiver's reply (body,
  status text, gRPC details) is never shown as is: :func:`safe_text` keeps a short, printable
  ASCII excerpt of the status text only.
- No attempt outlives a ``deadline`` (closing): its timeout is cut to the time left, and a request
  cut short is retryable, so it is spooled (a receiver that took it anyway gets it twice after
  ``replay``: at least once, never lost).
"""

from __future__ import annotations

import os
import socket
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
    keep: bool = False  # not retried now, but worth a later replay (server errors): spooled

    @property
    def spool(self) -> bool:
        """A failure whose request goes to the spool (retryable, or kept for replay)."""
        return not self.ok and (self.retryable or self.keep)


OK = Result(True)


def safe_text(text: str, limit: int = 60) -> str:
    """``text`` reduced to printable ASCII (no escape sequences, no newlines), at most ``limit``
    characters: what a receiver or a network error says may be shown only like this."""
    cleaned = "".join(c if " " <= c <= "~" else " " for c in str(text))
    cleaned = " ".join(cleaned.split())
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 3] + "..."


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


def resolve_target(values: Any, endpoint: str | None = None, protocol: str | None = None,
                   signal: str = "traces") -> OtlpTarget | None:
    """The target of ``signal`` ("traces" or "metrics") from settings values
    (``config.load`` resolves both signals once; the commands call it again only for their
    ``--endpoint``/``--protocol`` flags, which override the variables). None
    when no endpoint is configured, or for metrics when ``OTEL_METRICS_EXPORTER`` is ``none``."""
    if not endpoint and "otlp" not in values.get(f"OTEL_{signal.upper()}_EXPORTER", ("otlp",)):
        return None  # OTEL_TRACES_EXPORTER / OTEL_METRICS_EXPORTER without otlp
    proto = protocol or _pick(values, signal, "PROTOCOL") or "http/protobuf"
    specific = values.get(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT")
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


GRPC_PROXY_VARIABLES = ("grpc_proxy", "https_proxy", "http_proxy", "GRPC_PROXY", "HTTPS_PROXY", "HTTP_PROXY")


def unreachable(target: OtlpTarget) -> str | None:
    """Why nothing can be sent to ``target`` now (its host refuses TCP connections, does not
    answer within the target's timeout, or has no address), else None. None too where a proxy
    carries the requests (gRPC honours the proxy variables): the proxy's reach is not known here."""
    if target.protocol == "grpc" and any(os.environ.get(name) for name in GRPC_PROXY_VARIABLES):
        return None
    text = target.endpoint
    try:
        parts = urlsplit(text if "://" in text else "//" + text)
        host, port = parts.hostname, parts.port
    except ValueError:
        return None  # the endpoint's own check names this
    if not host:
        return None
    if port is None:
        tls = parts.scheme == "https" or (not parts.scheme and not target.insecure)
        port = 443 if tls else 80
    try:
        socket.create_connection((host, port), timeout=target.timeout_s).close()
    except ConnectionRefusedError:
        return "connection refused: nothing listens there"
    except socket.gaierror:
        return f"host name {safe_text(host, 60)} not found"
    except (socket.timeout, TimeoutError):
        return f"no answer within {target.timeout_s:g} s"
    except OSError as exc:
        return safe_text(exc.strerror or exc.__class__.__name__)
    return None


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


Deadline = "float | None | Callable[[], float | None]"


def deliver(sink: Sink, request: bytes, retry_s: float, deadline: Deadline = None,
            sleep: Callable[[float], None] = time.sleep) -> tuple[Result, int]:
    """Send with exponential backoff (0.25 s doubling, at most 8 s per wait) for up to ``retry_s``
    seconds and never past ``deadline`` (``time.monotonic()``; a callable is asked again before
    each attempt and after each wait, so a close that begins meanwhile cuts the retries short).
    Returns the last result and the number of failed attempts."""
    def current() -> float | None:
        return deadline() if callable(deadline) else deadline

    started = time.monotonic()
    wait, failures = 0.25, 0
    while True:
        end = current()
        left = None if end is None else max(0.05, end - time.monotonic())
        result = sink.send(request, left)
        if result.ok or not result.retryable:
            return result, failures
        failures += 1
        pause = min(result.retry_after_s if result.retry_after_s is not None else wait, 8.0)
        end = current()
        give_up = started + retry_s if end is None else min(started + retry_s, end)
        if time.monotonic() + pause >= give_up:
            return result, failures
        sleep(pause)
        end = current()
        if end is not None and time.monotonic() >= end:
            return result, failures
        wait = min(wait * 2, 8.0)
