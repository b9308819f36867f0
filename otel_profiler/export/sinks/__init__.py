"""Where encoded OTLP requests go: an OTLP/gRPC or OTLP/HTTP endpoint, a file, or the spool.

This package's ``__init__`` is light (no grpc, no protobuf): it holds the delivery loop with retries
and backoff. Where each signal goes (:class:`OtlpTarget`, the ``OTEL_EXPORTER_OTLP_*`` rules) is
``otel_profiler.shared.otlp_target``. The network clients live in ``grpc_sink`` and
``http_sink`` and are imported only by :func:`open_sink`, i.e. in the exporter process or the CLI.

Rules (OTLP exporter specification), beside those of the targets:

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
from dataclasses import dataclass
from typing import Callable, Protocol, TypeAlias
from urllib.parse import urlsplit

from ...shared.otlp_target import OtlpTarget, safe_text


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


class Sink(Protocol):
    def send(self, request: bytes, timeout_s: float | None = None) -> Result:
        """One attempt, waiting at most ``timeout_s`` (never more than the target's timeout)."""
        ...

    def close(self) -> None: ...


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


Deadline: TypeAlias = "float | None | Callable[[], float | None]"


def deliver(sink: Sink, request: bytes, retry_s: float, deadline: Deadline = None,
            sleep: Callable[[float], object] = time.sleep) -> tuple[Result, int]:
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
