"""Delivery of encoded OTLP span requests: each one ends delivered, spooled, or counted as dropped.

A request handed to :class:`Delivery` is *pending* until one of three things happens to it:

- **delivered**: the endpoint acknowledged it (``spans_exported``; a partial success counts the
  spans it rejected as ``spans_rejected``);
- **spooled**: written to the spool for ``otel-profiler replay`` (``spans_spooled``): after
  retryable failures for ``retry_s`` seconds (the OTLP rules in ``otel_profiler.export.sinks``), at once
  for a server error (HTTP 5xx, gRPC INTERNAL), while the endpoint is known to be down, and for
  everything still pending when the exporter closes;
- **dropped**: counted (``spans_dropped``) with its reason in one warning: a final refusal (HTTP
  4xx, authentication, TLS), no spool configured, the spool full or not writable.

In the exporter process requests are sent by one thread (:meth:`Delivery.threaded`), so encoding
the next batch never waits for the network and a close never waits for an attempt in flight:
:meth:`finish` keeps sending while the endpoint answers, until the network deadline, then spools
whatever is not acknowledged, a local write that takes milliseconds. A request in flight at that
moment is spooled too: if the receiver took it after all, ``replay`` delivers it twice (at least
once, never lost). ``otel-profiler export`` uses the same class inline (no thread).

``spans_pending`` and ``requests_pending`` (levels, in the shared counters) say what a killed
exporter process had not settled yet, so its loss is counted, not guessed.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from .sinks import Result, Sink, deliver
from .sinks.files import SENT

if TYPE_CHECKING:
    from .counters import Counters
    from .sinks.files import Spool

MAX_PENDING_BYTES = 64 << 20  # more waiting for the network than this goes to the spool at once


@dataclass(eq=False, repr=False)
class _Item:
    """One request: compared by identity (two requests may hold the same bytes), and never shown:
    its text is megabytes of encoded spans."""

    request: bytes
    spans: int
    done: bool = False


class _Recording:
    """A sink wrapper remembering whether the latest attempt failed (the endpoint is failing)."""

    def __init__(self, sink: Sink, owner: "Delivery") -> None:
        self.sink, self.owner = sink, owner

    def send(self, request: bytes, timeout_s: float | None = None) -> Result:
        result = self.sink.send(request, timeout_s)
        self.owner._failing = not result.ok
        return result

    def close(self) -> None:
        """Nothing: the wrapped sink is its owner's to close."""


class Delivery:
    def __init__(self, sink: Sink, spool: Spool | None, counters: Counters, retry_s: float, probe_s: float,
                 describe: str, warn_once: Callable[[str, str], None],
                 closing_deadline: Callable[[], float | None] = lambda: None) -> None:
        self.sink, self.spool, self.counters = sink, spool, counters
        self.retry_s, self.probe_s, self.describe = retry_s, probe_s, describe
        self._warn_once = warn_once
        self._closing_deadline = closing_deadline  # monotonic network deadline once closing
        self._cond = threading.Condition()
        self._pending: deque[_Item] = deque()
        self._pending_bytes = 0
        self._down_until = 0.0
        self._next_drain = 0.0
        self._failing = False
        self._stop_network = False
        self._finished = False
        self._wake = threading.Event()  # cuts a backoff pause short when closing begins
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ the sending thread
    def threaded(self) -> "Delivery":
        """Send from a thread of its own (the exporter process)."""
        self._thread = threading.Thread(target=self._run, name="otel-profiler-sender", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._pending and not self._finished:
                    self._cond.wait(timeout=max(0.2, min(self.probe_s, 1.0)))
                if self._finished:
                    return
                item = self._pending[0] if self._pending else None
            try:
                if item is None:
                    self.drain()
                else:
                    self._process(item)
            except Exception as exc:  # never let the thread die with requests pending
                self._warn_once("sender:" + exc.__class__.__name__,
                                f"span sending failed ({exc.__class__.__name__}); spooling instead")
                if item is not None:
                    self._settle(item, None, spool_reason="sending failed")

    # ------------------------------------------------------------------ the requests
    def put(self, request: bytes, spans: int) -> None:
        """Hand over one request: sent now (inline) or by the sending thread."""
        item = _Item(request, spans)
        if self._thread is None:
            self._process(item)
            return
        with self._cond:
            direct = self._stop_network or self._pending_bytes + len(request) > MAX_PENDING_BYTES
            if not direct:
                self._pending.append(item)
                self._pending_bytes += len(request)
                self._levels()
                self._cond.notify_all()
        if direct:
            self._settle(item, None, spool_reason="closing" if self._stop_network else "backlog")

    def _deadline(self) -> float | None:
        """The network deadline: none while running; at close, the close's, or now when the
        endpoint is failing (no point waiting for it)."""
        end = self._closing_deadline()
        if self._stop_network or (end is not None and self._failing):
            return time.monotonic() - 1.0
        return end

    def _process(self, item: _Item) -> None:
        now = time.monotonic()
        end = self._deadline()
        if (end is not None and now >= end) or now < self._down_until:
            self._settle(item, None, spool_reason="endpoint down")
            return
        retry_s = 0.0 if self._down_until else self.retry_s
        result, failures = deliver(_Recording(self.sink, self), item.request, retry_s, self._deadline,
                                   sleep=self._wake.wait)
        self.counters.add("requests_failed_attempts", failures)
        if result.ok:
            self._down_until = 0.0
            self._settle(item, result)
            self.drain()
            return
        if result.spool:
            self._down_until = time.monotonic() + self.probe_s
            where = self.spool.folder if self.spool else "(no spool: dropping)"
            self._warn_once("down:" + result.message[:40],
                            f"cannot deliver to {self.describe} ({result.message}); spooling to {where}")
        else:
            self._warn_once("fatal:" + result.message[:40],
                            f"{self.describe} refused spans ({result.message}); dropping them")
        self._settle(item, result)

    def _settle(self, item: _Item, result: Result | None, spool_reason: str = "") -> None:
        """Count ``item`` once: delivered (``result.ok``), spooled, or dropped with a reason."""
        with self._cond:
            if item.done:
                return  # a close spooled it while it was in flight
            item.done = True
            if item in self._pending:  # (sent inline, or spooled before it was queued: not there)
                self._pending.remove(item)
                self._pending_bytes -= len(item.request)
            c = self.counters
            if result is not None and result.ok:
                c.add("requests_sent")
                c.add("spans_exported", item.spans - result.rejected)
                if result.rejected:
                    c.add("spans_rejected", result.rejected)
                    self._warn_once("rejected", f"{self.describe}: {result.message}")
            elif result is None or result.spool:
                spool = self.spool
                if spool is not None and spool.put(item.request) is None:  # None: kept
                    c.add("requests_spooled")
                    c.add("spans_spooled", item.spans)
                    c.set("spool_bytes", spool.size)
                else:
                    c.add("requests_dropped")
                    c.add("spans_dropped", item.spans)
            else:
                c.add("requests_dropped")
                c.add("spans_dropped", item.spans)
            self._levels()
            self._cond.notify_all()

    def _levels(self) -> None:
        self.counters.set("requests_pending", len(self._pending))
        self.counters.set("spans_pending", sum(i.spans for i in self._pending))

    def drain(self) -> None:
        """Send spooled requests while the endpoint answers (at most every ``probe_s`` seconds)."""
        now = time.monotonic()
        if not self.spool or not self.spool.size or now < self._next_drain or now < self._down_until \
                or self._deadline() is not None:
            return
        self._next_drain = now + self.probe_s

        def send(request: bytes) -> str:
            end = self._deadline()
            if end is not None and time.monotonic() >= end:
                return "down"
            left = None if end is None else end - time.monotonic()
            if self.sink.send(request, left).ok:
                self.counters.add("spool_requests_delivered")
                return SENT
            return "down"

        self.spool.drain(send)
        self.counters.set("spool_bytes", self.spool.size)

    # ------------------------------------------------------------------ closing
    def finish(self, network_deadline: float | None) -> None:
        """Keep sending until nothing is pending or ``network_deadline`` (monotonic) passes, or at
        once when the endpoint is failing; then spool whatever is not acknowledged."""
        self._wake.set()
        if self._thread is not None:
            with self._cond:
                while self._pending and not self._failing and not self._stop_network and \
                        (network_deadline is None or time.monotonic() < network_deadline):
                    left = None if network_deadline is None else network_deadline - time.monotonic()
                    self._cond.wait(timeout=0.1 if left is None else max(0.01, min(0.1, left)))
                self._stop_network = True
                items = list(self._pending)
            for item in items:
                self._settle(item, None, spool_reason="closing")
            with self._cond:
                self._finished = True
                self._cond.notify_all()
        self._stop_network = True

    def persist_now(self) -> None:
        """Spool everything pending at once, no network (the job is gone)."""
        self._stop_network = True
        self.finish(time.monotonic())
