"""The Prometheus ``/metrics`` endpoint: text format 0.0.4 and OpenMetrics (with exemplars).

``PointsCollector`` turns the points of the metric sources into prometheus-client metric families
at scrape time (names and labels translated as ``points`` documents); nothing is computed
for a scrape beyond formatting the latest sample. ``Endpoint`` serves a private registry with
prometheus-client's WSGI app, content-negotiated (Prometheus asks for OpenMetrics, which is the
only format that carries exemplars), on 127.0.0.1 by default, optionally over TLS (certificate and
key files) and behind HTTP basic auth. Under torchrun each local rank serves ``port + LOCAL_RANK``.
At most ``sockets.MAX_CONNECTIONS`` connections are served at once, each ended
``sockets.REQUEST_DEADLINE_S`` after it was accepted, before authentication; the listening socket
and the connections are closed in forked children (``sockets``). Any failure to serve (port in
use, unreadable TLS files) is one warning; profiling goes on.
"""

from __future__ import annotations

import base64
import hmac
import logging
import os
import ssl
import threading
import time
from collections import defaultdict
from typing import Any, Callable, Iterable

from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily)
from prometheus_client.registry import CollectorRegistry
from prometheus_client.samples import Exemplar

from . import points as m
from . import sockets
from .points import HistogramValue, Point
from .sources import MetricSource

log = logging.getLogger(__name__)


def _labels(spec: m.Spec) -> list[str]:
    return [m.prometheus_label(k) for k in spec.labels]


def _bound(value: float) -> str:
    return "+Inf" if value == float("inf") else repr(float(value))


class PointsCollector:
    """prometheus-client collector over ``sources`` (``sources.MetricSource``), read at each scrape."""

    def __init__(self, sources: list[MetricSource]) -> None:
        self.sources = sources
        self.cpu_seconds = 0.0  # thread CPU time spent in scrapes (overhead)

    def collect(self) -> Iterable[Any]:
        t0 = time.thread_time()
        by_spec: dict[m.Spec, list[Point]] = defaultdict(list)
        for source in self.sources:
            try:
                for p in source.points():
                    by_spec[p.spec].append(p)
            except Exception:
                log.debug("a metrics source failed during a scrape; its points are left out", exc_info=True)
        by_spec[m.OVERHEAD].append(Point(m.OVERHEAD, {"otel_profiler.component": "scrape"}, self.cpu_seconds))
        families = [self._family(spec, points) for spec, points in by_spec.items()]
        self.cpu_seconds += time.thread_time() - t0
        return families

    def _family(self, spec: m.Spec, points: list[Point]) -> Any:
        labels = _labels(spec)
        name, doc = spec.prometheus, f"{spec.doc} (OTel: {spec.name}, unit {spec.unit})"
        family: Any  # the three families' add_metric take different arguments
        if spec.kind == m.HISTOGRAM:
            family = HistogramMetricFamily(name, doc, labels=labels)
        elif spec.kind == m.COUNTER:
            family = CounterMetricFamily(name, doc, labels=labels)
        else:
            family = GaugeMetricFamily(name, doc, labels=labels)
        for p in points:
            values = [str(p.attributes.get(k, "")) for k in spec.labels]
            if isinstance(p.value, HistogramValue):
                family.add_metric(values, _buckets(p.value), p.value.total)
            else:
                family.add_metric(values, p.value)
        return family


def _buckets(h: HistogramValue) -> list[tuple]:
    out: list[tuple] = []
    running = 0
    for bound, count, ex in zip(list(h.bounds) + [float("inf")], h.counts, h.exemplars):
        running += count
        if ex is None:
            out.append((_bound(bound), running))
        else:
            trace_hex, value, ts = ex
            out.append((_bound(bound), running, Exemplar({"trace_id": trace_hex}, value, ts)))
    return out


# ------------------------------------------------------------------------------- the server
class _BasicAuth:
    """WSGI middleware: 401 unless the request carries ``user:password`` (constant-time compare of
    the credentials; the scheme name is case-insensitive, as RFC 9110 says)."""

    def __init__(self, app: Any, credentials: str) -> None:
        self.app = app
        self.expected = base64.b64encode(credentials.encode())

    def __call__(self, environ: dict, start_response: Any) -> Any:
        scheme, _, token = environ.get("HTTP_AUTHORIZATION", "").strip().partition(" ")
        given = token.strip().encode("latin-1", "replace")
        if not (scheme.lower() == "basic" and hmac.compare_digest(given, self.expected)):
            start_response("401 Unauthorized", [("WWW-Authenticate", 'Basic realm="otel-profiler"'),
                                                ("Content-Type", "text/plain")])
            return [b"unauthorized\n"]
        return self.app(environ, start_response)


class Endpoint:
    """One ``/metrics`` server on a daemon thread. ``Endpoint.start`` returns None after one warning
    when it cannot serve."""

    def __init__(self, server: Any, thread: threading.Thread, url: str) -> None:
        self.server, self.thread, self.url = server, thread, url
        self._pid = os.getpid()  # a forked child closes nothing: its copies are closed at the fork

    @classmethod
    def start(cls, registry: CollectorRegistry, host: str, port: int, certfile: str = "", keyfile: str = "",
              basic_auth: str = "", warn: Callable[[str], None] = print) -> "Endpoint | None":
        from prometheus_client.exposition import (ThreadingWSGIServer, _SilentHandler, make_server,
                                                  make_wsgi_app)

        scheme = "https" if certfile or keyfile else "http"
        try:
            context = _tls_context(certfile, keyfile) if scheme == "https" else None
        except (OSError, ssl.SSLError, ValueError) as exc:
            warn(f"Prometheus endpoint is off: TLS certificate/key unusable ({exc})")
            return None
        app = make_wsgi_app(registry)
        if basic_auth:
            app = _BasicAuth(app, basic_auth)
        class Handler(_SilentHandler):
            timeout = sockets.REQUEST_DEADLINE_S  # each read or write; the whole connection: deadline_s

        class Server(sockets.BoundedThreads, ThreadingWSGIServer):
            request_queue_size = 128  # connections waiting to be accepted (the default 5 drops SYNs)
            max_connections = sockets.MAX_CONNECTIONS
            deadline_s = sockets.REQUEST_DEADLINE_S

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # an idle timeout, a failed handshake, a client gone: never a traceback

        try:
            server = make_server(host, port, app, Server, handler_class=Handler)
        except OSError as exc:
            warn(f"Prometheus endpoint is off: cannot listen on {host}:{port} ({exc.strerror or exc})")
            return None
        if context is not None:
            # The handshake runs on the first read, in the request's own thread: a client that
            # stalls mid-handshake cannot block the accept loop (and so every other scraper).
            server.socket = context.wrap_socket(server.socket, server_side=True,
                                                do_handshake_on_connect=False)
        sockets.close_in_forked_children(server.socket)
        thread = threading.Thread(target=server.serve_forever, name="otel-profiler-prometheus", daemon=True)
        thread.start()
        bound = server.server_address[1]
        return cls(server, thread, f"{scheme}://{host}:{bound}/metrics")

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def close(self) -> None:
        if os.getpid() != self._pid:
            return  # shutdown() would wait for a serving thread that a forked child does not have
        try:
            self.server.shutdown()
            self.server.server_close()
        except Exception:
            log.debug("stopping the metrics endpoint failed", exc_info=True)


def _tls_context(certfile: str, keyfile: str) -> ssl.SSLContext:
    if not (certfile and keyfile):
        raise ValueError("both a certificate file and a key file are needed")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile, keyfile)
    return context
