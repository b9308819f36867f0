"""Spans → OTLP requests → sinks, with counters: the work of the exporter process (and, inline, of
``otel-profiler export``).

:class:`Pipeline` turns each rank's EventBatch into spans (``otel_profiler.spans.build``), spans into
requests (``otel_profiler.export.otlp``), and hands each request to the OTLP JSON lines file, the ``.pb``
file and :class:`otel_profiler.export.delivery.Delivery` (endpoint, retry, spool). Metrics snapshots go to
the metrics endpoint with a short retry and no spool: every snapshot is cumulative, so the next one
carries whatever a lost one held; the points of a snapshot that was not delivered are counted as
dropped, in the ``counters.Counters``.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from cuda_tracer.model.events import EventBatch

from ..metrics.points import MetricsSnapshot
from ..profiler_warnings import print_warning
from ..shared.otlp_target import OtlpTarget
from .counters import Counters
from .export_config import ExportConfig

if TYPE_CHECKING:
    from .delivery import Delivery
    from .sinks import Sink
    from .sinks.files import FileSink

log = logging.getLogger(__name__)

METRICS_RETRY_S = 2.0
KNOWN_STEPS = 256  # steps per rank remembered for events that arrive in a later batch
HOLD_OPEN_S = 300  # events after the last finished step wait at most this long (event time) for it
HOLD_OPEN_ROWS = 2_000_000  # ... and are never more than this many


@dataclass
class _RankState:
    """Per (run, rank): the latest metadata, steps seen, events held for a step still open."""

    meta: dict[str, Any] = field(default_factory=dict)
    steps: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    held: EventBatch | None = None


class Pipeline:
    """Spans → requests → sinks (see the module docstring). ``threaded``: requests are sent by a
    thread of their own (the exporter process); else inline. ``closing_deadline`` returns the
    network deadline (monotonic) once a close has begun."""

    def __init__(self, config: ExportConfig, counters: Counters, warn: Callable[[str], None] = print_warning,
                 threaded: bool = False, closing_deadline: Callable[[], float | None] = lambda: None) -> None:
        from .delivery import Delivery
        from .sinks import open_sink
        from .sinks.files import DelimitedFile, JsonLinesFile, Spool

        self.config, self.counters, self._warn = config, counters, warn
        self._warned: set[str] = set()
        self._closing_deadline = closing_deadline
        self.sink: Sink | None = open_sink(config.target) if config.target else None
        sink = self.sink
        self.metrics_sink = self._open_metrics_sink()
        self._metrics_down_until = 0.0
        self.json = JsonLinesFile(config.json_file) if config.json_file else None
        self.pb = DelimitedFile(config.pb_file) if config.pb_file else None
        self.spool = Spool(config.spool_dir, config.spool_max_bytes, warn) \
            if sink and config.spool_dir and config.spool_max_bytes > 0 else None
        self.delivery: Delivery | None = None
        if sink is not None:
            self.delivery = Delivery(sink, self.spool, counters, config.retry_s, config.probe_s,
                                     _described(config.target), self.warn_once, closing_deadline)
            if threaded:
                self.delivery.threaded()
        self._ranks: dict[tuple[str, Any], _RankState] = {}

    def warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            self._warn(message)

    def handle(self, meta: dict[str, Any], batch: EventBatch) -> int:
        """Export one rank's batch. Steps are remembered per rank (``KNOWN_STEPS``) so GPU events of
        a later batch join the step they belong to, and events after the last finished step are
        held back (``split_open_tail``) until the batch with that step's STEP event arrives or
        ``flush``. Returns the number of spans built now."""
        from ..spans.build import split_open_tail
        from ..shared.ids import batch_steps, run_id_of

        key = (self.config.span_options.run_id or run_id_of(meta), meta.get("rank"))
        state = self._ranks.setdefault(key, _RankState())
        if state.held is not None and len(state.held):
            batch = EventBatch.concat([state.held, batch])
        state.meta = meta
        for step in batch_steps(batch):
            state.steps.pop(step[0], None)
            state.steps[step[0]] = step
        while len(state.steps) > KNOWN_STEPS:
            state.steps.pop(next(iter(state.steps)))
        closed = max((end for _, _, end in state.steps.values()), default=-(1 << 62))
        ready, state.held = split_open_tail(batch, closed, HOLD_OPEN_S * 10**9, HOLD_OPEN_ROWS)
        return self._export(meta, ready, list(state.steps.values()))

    def flush(self) -> int:
        """Export every held-back event (at close: their steps will not come any more)."""
        n = 0
        for state in self._ranks.values():
            if state.held is not None and len(state.held):
                held, state.held = state.held, None
                n += self._export(state.meta, held, list(state.steps.values()))
        return n

    def _open_metrics_sink(self) -> Sink | None:
        """The metrics sink, or None (a metrics-only problem, such as a missing certificate file,
        costs one warning and the metrics, never the spans)."""
        from .sinks import open_sink

        target = self.config.metrics_target
        if target is None:
            return None
        try:
            return open_sink(target)
        except Exception as exc:
            self.warn_once("metrics-sink", f"OTLP metrics are off: {target.describe()} cannot be "
                                           f"used ({exc.__class__.__name__}: {exc})")
            return None

    def handle_metrics(self, snapshot: MetricsSnapshot) -> None:
        """Send one metrics snapshot within ``METRICS_RETRY_S`` (so a silent endpoint never holds
        up spans) and never past the close's network deadline; after a failure, snapshots are
        skipped for ``probe_s``. A snapshot not delivered counts its points as dropped (the next
        one carries the same totals, so nothing is spooled)."""
        from ..version import __version__
        from .metrics_otlp import encode_metrics
        from .sinks import deliver

        if self.config.console_metrics:
            from .sinks.http_json_sink import to_otlp_json

            _console(to_otlp_json(encode_metrics(snapshot, __version__), "metrics"))
        if self.metrics_sink is None:
            return
        now = time.monotonic()
        closing = self._closing_deadline()
        if now < self._metrics_down_until or (closing is not None and now >= closing):
            self.counters.add("metric_requests_failed")
            self.counters.add("metric_points_dropped", len(snapshot.points))
            return
        budget = now + METRICS_RETRY_S
        request = encode_metrics(snapshot, __version__)
        result, _ = deliver(self.metrics_sink, request, METRICS_RETRY_S,
                            budget if closing is None else min(closing, budget))
        if result.ok:
            self._metrics_down_until = 0.0
            self.counters.add("metric_requests_sent")
            self.counters.add("metric_points_exported", max(0, len(snapshot.points) - result.rejected))
            if result.rejected:
                self.counters.add("metric_points_rejected", result.rejected)
                self.warn_once("metrics-rejected", f"{_described(self.config.metrics_target)}: {result.message}")
        else:
            self._metrics_down_until = time.monotonic() + self.config.probe_s
            self.counters.add("metric_requests_failed")
            self.counters.add("metric_points_dropped", len(snapshot.points))
            self.warn_once("metrics:" + result.message[:40], metrics_not_delivered(
                _described(self.config.metrics_target), result.message))

    def _export(self, meta: dict[str, Any], batch: EventBatch, known_steps: list) -> int:
        from .otlp import encode_json_lines, split_requests
        from ..spans.build import build_spans

        if not len(batch) or not self.config.has_span_sink:
            return 0
        table = build_spans(meta, batch, self.config.span_options, known_steps=known_steps)
        self.counters.add("spans_built", len(table))
        if self.json or self.config.console_spans:
            lines = encode_json_lines(table)
            if self.json:
                self.counters.add("file_bytes_written", self._write(self.json, lines))
            if self.config.console_spans:
                _console(lines)
        if self.pb or self.delivery:
            for request, n in split_requests(table, self.config.max_request_bytes):
                if self.pb:
                    self.counters.add("file_bytes_written", self._write(self.pb, request))
                if self.delivery:
                    self.delivery.put(request, n)
        return len(table)

    def _write(self, sink: FileSink, data: bytes) -> int:
        """A file sink's write; a full disk costs one warning and that file, not the export."""
        try:
            return sink.write(data)
        except OSError as exc:
            self.warn_once(f"file:{id(sink)}", f"cannot write {sink.path} "
                                               f"({exc.strerror or exc}); spans still go to the endpoint")
            return 0

    def drain(self) -> None:
        if self.delivery is not None:
            self.delivery.drain()

    def close(self, network_deadline: float | None = None) -> None:
        """Flush held-back events, settle every pending request (sent until ``network_deadline``,
        then spooled), close sinks and files."""
        try:
            self.flush()
        except Exception as exc:
            self.warn_once("flush", f"span export of held-back events failed ({exc.__class__.__name__}: {exc})")
        if self.delivery is not None:
            self.delivery.finish(network_deadline)
        for part in (self.spool, self.json, self.pb, self.sink, self.metrics_sink):
            if part is not None:
                try:
                    part.close()
                except Exception:
                    log.debug("closing a part failed", exc_info=True)


def _console(data: bytes) -> None:
    """OTEL_*_EXPORTER=console: OTLP JSON on the job's stdout (one request per line)."""
    out = sys.stdout.buffer
    out.write(data if data.endswith(b"\n") else data + b"\n")
    out.flush()


def _described(target: OtlpTarget | None) -> str:
    """The endpoint as warnings name it (a sink exists only with a target, so never "no endpoint")."""
    return target.describe() if target is not None else "no endpoint"


def metrics_not_delivered(target: str, message: str) -> str:
    """The one line said when metrics are not delivered. An endpoint that has no metrics service
    (HTTP 404, gRPC UNIMPLEMENTED: Jaeger, which takes traces only) is named as such, with the
    setting that sends none."""
    if "404" in message or "UNIMPLEMENTED" in message:
        return (f"{target}: metrics not delivered ({message}): this endpoint takes no metrics (Jaeger takes "
                "traces only); set OTEL_METRICS_EXPORTER=none, or OTEL_EXPORTER_OTLP_METRICS_ENDPOINT to a "
                "Collector or Prometheus")
    return f"{target}: metrics not delivered ({message}); the next export sends the totals again"
