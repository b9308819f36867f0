"""The exporter process: EventBatches and metric snapshots in through a bounded queue, OTLP out,
training never waits.

Training-process side (:class:`Exporter`, :func:`exporter_from_env`) imports no protobuf, grpc or
encoder: ``submit`` puts ``(meta, batch)`` and ``submit_metrics`` a ``MetricsSnapshot`` on a bounded
``multiprocessing`` queue without blocking (False and a drop counter when full). A separate
*spawned* process (:func:`_child_main`) builds spans, encodes spans and metrics and sends them, so
encoding and network I/O never hold the training GIL. The child is started with ``__main__``
hidden, so spawning never re-runs the training script.

Child side (:class:`Pipeline`, also used synchronously by ``otel-profiler export``):
spans (``otel_profiler.spans``) → requests (``otel_profiler.otlp``) → sinks:

- OTLP endpoint: retried with backoff for ``OTEL_PROFILER_EXPORT_RETRY_S``; when it stays down the
  request goes to the spool (bounded by ``OTEL_PROFILER_SPOOL_MAX_MB``) and the endpoint is only
  probed every ``PROBE_S`` seconds meanwhile; once it answers again the spool is drained.
  ``otel-profiler replay SPOOL`` sends what is left later.
- OTLP JSON lines file (``OTEL_PROFILER_OTLP_FILE``) and length-delimited ``.pb`` file.
- Metrics (``metrics_otlp``) go to the metrics endpoint with a short retry and no spool: every
  snapshot is cumulative, so the next one carries whatever a lost one held.

Counters (``Exporter.counters()``) count everything received, exported, spooled and dropped.
``close(timeout_s)`` flushes within the timeout: 80 % into it, remaining requests and batches are
spooled instead of sent (no attempt outlives that point), at 95 % batches still queued are dropped
(counted), and a child that still runs at the end is terminated. Exporters still open at exit are
closed by one exit hook registered at import, so after a session's own hook has written its last
part. A dead exporter process (killed, out of memory) costs one warning; later batches are counted
as dropped (they stay in the profile folder).
"""

from __future__ import annotations

import atexit
import multiprocessing as mp
import multiprocessing.util  # noqa: F401  (its exit hook, registered first, must run after ours)
import os
import queue as queue_mod
import sys
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

from cuda_tracer.events import EventBatch

from .metric_points import MetricsSnapshot
from .sinks import OtlpTarget, resolve_target
from .span_options import SpanOptions, options_from_settings

COUNTERS = (
    "batches_received", "batches_failed", "batches_dropped_at_close",
    "spans_built", "spans_exported", "spans_rejected", "spans_spooled", "spans_dropped",
    "requests_sent", "requests_failed_attempts", "requests_spooled", "requests_dropped",
    "spool_requests_delivered", "file_bytes_written",
    "metric_snapshots_received", "metric_requests_sent", "metric_requests_failed",
    "metric_points_exported", "metric_points_rejected",
    "spool_bytes",  # a level, not a count: what the spool holds now
)
METRICS_RETRY_S = 2.0
PROBE_S = 5.0
KNOWN_STEPS = 256  # steps per rank remembered for events that arrive in a later batch
HOLD_OPEN_S = 300  # events after the last finished step wait at most this long (event time) for it
HOLD_OPEN_ROWS = 2_000_000  # ... and are never more than this many


@dataclass
class _RankState:
    """Per (run, rank): the latest metadata, steps seen, events held for a step still open."""

    meta: dict[str, Any] = field(default_factory=dict)
    steps: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    held: Any = None


def warn(message: str) -> None:
    print(f"otel-profiler: warning: {message}", file=sys.stderr, flush=True)


@dataclass
class ExportConfig:
    """Everything the exporter process needs (picklable; headers only inside ``target``)."""

    target: OtlpTarget | None = None
    metrics_target: OtlpTarget | None = None
    json_file: str = ""
    pb_file: str = ""
    spool_dir: str = ""
    spool_max_bytes: int = 1024 << 20
    retry_s: float = 30.0
    queue_size: int = 64
    max_request_bytes: int = 3 << 20
    probe_s: float = PROBE_S  # while the endpoint is down: one try per this many seconds
    span_options: SpanOptions = field(default_factory=SpanOptions)
    console_spans: bool = False  # OTEL_TRACES_EXPORTER=console: OTLP JSON lines on stdout
    console_metrics: bool = False  # OTEL_METRICS_EXPORTER=console: likewise for metrics

    @property
    def has_span_sink(self) -> bool:
        return bool(self.target or self.json_file or self.pb_file or self.console_spans)

    @property
    def wants_metrics(self) -> bool:
        return self.metrics_target is not None or self.console_metrics

    @property
    def has_sink(self) -> bool:
        return self.has_span_sink or self.wants_metrics


def config_from_settings(settings: Any, default_service: str | None = None) -> ExportConfig:
    values = settings.values if hasattr(settings, "values") else dict(settings)
    spool = values.get("OTEL_PROFILER_SPOOL_DIR") or os.path.join(
        values.get("OTEL_PROFILER_OUTPUT_DIR") or "./otel-profile", "otlp-spool")
    return ExportConfig(
        target=resolve_target(values, warn=warn),
        metrics_target=resolve_target(values, warn=warn, signal="metrics")
        if values.get("OTEL_PROFILER_METRICS", True) else None,
        json_file=values.get("OTEL_PROFILER_OTLP_FILE") or "",
        spool_dir=spool,
        spool_max_bytes=int(values.get("OTEL_PROFILER_SPOOL_MAX_MB", 1024)) << 20,
        retry_s=float(values.get("OTEL_PROFILER_EXPORT_RETRY_S", 30.0)),
        queue_size=int(values.get("OTEL_PROFILER_EXPORT_QUEUE", 64)),
        span_options=options_from_settings(settings, default_service),
        console_spans="console" in values.get("OTEL_TRACES_EXPORTER", ()),
        console_metrics="console" in values.get("OTEL_METRICS_EXPORTER", ())
        and values.get("OTEL_PROFILER_METRICS", True))


# ----------------------------------------------------------------------------- counters
class Counters:
    """Named integer counters in a dict (the CLI) or a shared array (the exporter process)."""

    def __init__(self, storage: Any = None) -> None:
        self._s = storage if storage is not None else [0] * len(COUNTERS)
        self._index = {name: i for i, name in enumerate(COUNTERS)}

    def add(self, name: str, n: int = 1) -> None:
        self._s[self._index[name]] += n

    def set(self, name: str, value: int) -> None:
        self._s[self._index[name]] = value

    def get(self, name: str) -> int:
        return int(self._s[self._index[name]])

    def snapshot(self) -> dict[str, int]:
        return {name: int(self._s[i]) for i, name in enumerate(COUNTERS)}


# ----------------------------------------------------------------------------- the pipeline
class Pipeline:
    """Spans → requests → sinks, with retry, spool and counters (runs in the exporter process)."""

    def __init__(self, config: ExportConfig, counters: Counters, warn: Callable[[str], None] = warn) -> None:
        from .sinks import open_sink
        from .sinks.files import DelimitedFile, JsonLinesFile, Spool

        self.config, self.counters, self._warn = config, counters, warn
        self._warned: set[str] = set()
        self.sink = open_sink(config.target) if config.target else None
        self.metrics_sink = self._open_metrics_sink()
        self._metrics_down_until = 0.0
        self.json = JsonLinesFile(config.json_file) if config.json_file else None
        self.pb = DelimitedFile(config.pb_file) if config.pb_file else None
        self.spool = Spool(config.spool_dir, config.spool_max_bytes, warn) \
            if self.sink and config.spool_dir and config.spool_max_bytes > 0 else None
        self._down_until = 0.0
        self._next_drain = 0.0
        self._ranks: dict[tuple[str, Any], _RankState] = {}

    def warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            self._warn(message)

    def handle(self, meta: dict[str, Any], batch: Any, deadline: float | None = None) -> int:
        """Export one rank's batch; ``deadline`` (monotonic) ends sending (spool instead).

        Steps are remembered per rank (``KNOWN_STEPS``) so GPU events of a later batch join the
        step they belong to, and events after the last finished step are held back
        (``split_open_tail``) until the batch with that step's STEP event arrives or ``flush``.
        Returns the number of spans built now."""
        from .spans import batch_steps, run_id_of, split_open_tail

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
        return self._export(meta, ready, list(state.steps.values()), deadline)

    def flush(self, deadline: float | None = None) -> int:
        """Export every held-back event (at close: their steps will not come any more)."""
        n = 0
        for state in self._ranks.values():
            if state.held is not None and len(state.held):
                held, state.held = state.held, None
                n += self._export(state.meta, held, list(state.steps.values()), deadline)
        return n

    def _open_metrics_sink(self) -> Any:
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

    def handle_metrics(self, snapshot: MetricsSnapshot, deadline: float | None = None) -> None:
        """Send one metrics snapshot within ``METRICS_RETRY_S`` (so a silent endpoint never holds
        up spans); after a failure, snapshots are skipped for ``probe_s``. Failures are counted
        and warned once: the next snapshot is cumulative, so nothing is spooled."""
        from . import __version__
        from .metrics_otlp import encode_metrics
        from .sinks import deliver

        if self.config.console_metrics:
            from .sinks.http_json_sink import to_otlp_json

            _console(to_otlp_json(encode_metrics(snapshot, __version__), "metrics"))
        if self.metrics_sink is None:
            return
        now = time.monotonic()
        if now < self._metrics_down_until:
            self.counters.add("metric_requests_failed")
            return
        budget = now + METRICS_RETRY_S
        request = encode_metrics(snapshot, __version__)
        result, _ = deliver(self.metrics_sink, request, METRICS_RETRY_S,
                            budget if deadline is None else min(deadline, budget))
        if result.ok:
            self._metrics_down_until = 0.0
            self.counters.add("metric_requests_sent")
            self.counters.add("metric_points_exported", max(0, len(snapshot.points) - result.rejected))
            if result.rejected:
                self.counters.add("metric_points_rejected", result.rejected)
                self.warn_once("metrics-rejected", f"{self.config.metrics_target.describe()}: {result.message}")
        else:
            self._metrics_down_until = time.monotonic() + self.config.probe_s
            self.counters.add("metric_requests_failed")
            self.warn_once("metrics:" + result.message[:40],
                           f"{self.config.metrics_target.describe()}: metrics not delivered "
                           f"({result.message}); the next export sends the totals again")

    def _export(self, meta: dict[str, Any], batch: Any, known_steps: list, deadline: float | None) -> int:
        from .otlp import encode_json_lines, split_requests
        from .spans import build_spans

        if not len(batch) or not self.config.has_span_sink:
            return 0
        table = build_spans(meta, batch, self.config.span_options, known_steps=known_steps)
        self.counters.add("spans_built", len(table))
        if self.json or self.config.console_spans:
            lines = encode_json_lines(table)
            if self.json:
                self.counters.add("file_bytes_written", self.json.write(lines))
            if self.config.console_spans:
                _console(lines)
        if self.pb or self.sink:
            for request, n in split_requests(table, self.config.max_request_bytes):
                if self.pb:
                    self.counters.add("file_bytes_written", self.pb.write(request))
                if self.sink:
                    self._send(request, n, deadline)
        return len(table)

    def _send(self, request: bytes, n: int, deadline: float | None) -> None:
        from .sinks import deliver

        now = time.monotonic()
        if (deadline is not None and now >= deadline) or now < self._down_until:
            self._spool(request, n)
            return
        retry_s = 0.0 if self._down_until else self.config.retry_s
        result, failures = deliver(self.sink, request, retry_s, deadline)
        self.counters.add("requests_failed_attempts", failures)
        if result.ok:
            self._down_until = 0.0
            self.counters.add("requests_sent")
            self.counters.add("spans_exported", n - result.rejected)
            if result.rejected:
                self.counters.add("spans_rejected", result.rejected)
                self.warn_once("rejected", f"{self.config.target.describe()}: {result.message}")
            self.drain(deadline)
        elif result.retryable:
            self._down_until = time.monotonic() + self.config.probe_s
            self.warn_once("down:" + result.message[:40],
                           f"cannot reach {self.config.target.describe()} ({result.message}); "
                           f"spooling to {self.spool.folder if self.spool else '(no spool: dropping)'}")
            self._spool(request, n)
        else:
            self.counters.add("requests_dropped")
            self.counters.add("spans_dropped", n)
            self.warn_once("fatal:" + result.message[:40],
                           f"{self.config.target.describe()} refused spans ({result.message}); dropping them")

    def _spool(self, request: bytes, n: int) -> None:
        if self.spool is not None and self.spool.put(request):
            self.counters.add("requests_spooled")
            self.counters.add("spans_spooled", n)
            self.counters.set("spool_bytes", self.spool.size)
        else:
            self.counters.add("requests_dropped")
            self.counters.add("spans_dropped", n)

    def drain(self, deadline: float | None = None) -> None:
        """Send spooled requests while the endpoint answers (at most every ``probe_s`` seconds)."""
        now = time.monotonic()
        if not self.spool or not self.spool.size or now < self._next_drain or now < self._down_until:
            return
        self._next_drain = now + self.config.probe_s

        def send(request: bytes) -> bool:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return False
            ok = self.sink.send(request, None if deadline is None else deadline - now).ok
            if ok:
                self.counters.add("spool_requests_delivered")
            return ok

        self.spool.drain(send)
        self.counters.set("spool_bytes", self.spool.size)

    def close(self, deadline: float | None = None) -> None:
        """Flush held-back events, then close sinks and files."""
        try:
            self.flush(deadline)
        except Exception as exc:
            self.warn_once("flush", f"span export of held-back events failed ({exc.__class__.__name__}: {exc})")
        for part in (self.spool, self.json, self.pb, self.sink, self.metrics_sink):
            if part is not None:
                try:
                    part.close()
                except Exception:
                    pass


def _console(data: bytes) -> None:
    """OTEL_*_EXPORTER=console: OTLP JSON on the job's stdout (one request per line)."""
    out = sys.stdout.buffer
    out.write(data if data.endswith(b"\n") else data + b"\n")
    out.flush()


def _child_main(q: Any, config: ExportConfig, shared: Any, closing: Any) -> None:
    """The exporter process: read batches until the sentinel, the close deadline or parent exit.

    ``closing`` holds two wall-clock times set by ``Exporter.close``: after the first, requests
    are spooled instead of sent; after the second, batches still queued are dropped (counted)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's; close() ends us
    counters = Counters(shared)
    try:
        pipeline: Pipeline | None = Pipeline(config, counters)
    except Exception as exc:  # e.g. unreadable certificate file
        warn(f"span exporter cannot start ({exc.__class__.__name__}: {exc}); spans are dropped")
        pipeline = None
    parent = mp.parent_process()
    errors: set[str] = set()
    while True:
        wall_deadline, give_up = closing[0] or None, closing[1]
        try:
            item = q.get(timeout=0.2 if wall_deadline else 1.0)
        except queue_mod.Empty:
            if wall_deadline or (parent is not None and not parent.is_alive()):
                break
            if pipeline is not None:
                pipeline.drain()
            continue
        except (EOFError, OSError):
            break
        if item is None:
            break
        is_metrics = isinstance(item, MetricsSnapshot)
        counters.add("metric_snapshots_received" if is_metrics else "batches_received")
        deadline = None
        if wall_deadline:
            if time.time() >= give_up:
                counters.add("metric_requests_failed" if is_metrics else "batches_dropped_at_close")
                continue
            deadline = time.monotonic() + (wall_deadline - time.time())  # passed: spooled
        if pipeline is None:
            counters.add("metric_requests_failed" if is_metrics else "batches_failed")
            continue
        try:
            if is_metrics:
                pipeline.handle_metrics(item, deadline)
            else:
                pipeline.handle(*item, deadline)
        except Exception as exc:
            counters.add("metric_requests_failed" if is_metrics else "batches_failed")
            key = f"{exc.__class__.__name__}: {exc}"[:200]
            if key not in errors:
                errors.add(key)
                warn(f"{'metrics' if is_metrics else 'span'} export failed ({key})")
    if pipeline is not None:
        wall_deadline = closing[0]
        pipeline.close(time.monotonic() + (wall_deadline - time.time()) if wall_deadline else None)


# ----------------------------------------------------------------------------- training side
def _start_hiding_main(proc: Any) -> None:
    """Start a spawned process without it re-importing ``__main__`` (the training script)."""
    main = sys.modules.get("__main__")
    saved = {k: getattr(main, k) for k in ("__file__", "__spec__") if main is not None and hasattr(main, k)}
    try:
        if main is not None:
            main.__spec__ = None
            if "__file__" in saved:
                del main.__file__
        proc.start()
    finally:
        for k, v in saved.items():
            setattr(main, k, v)


class Exporter:
    """Hands batches to the exporter process. ``submit`` never blocks and never raises."""

    def __init__(self, config: ExportConfig) -> None:
        ctx = mp.get_context("spawn")
        self.config = config
        self._queue = ctx.Queue(config.queue_size)
        self._shared = ctx.Array("q", len(COUNTERS), lock=False)
        self._closing = ctx.Array("d", 2, lock=False)  # (stop sending, stop spooling): see _child_main
        self._proc = ctx.Process(target=_child_main, name="otel-profiler-exporter", daemon=True,
                                 args=(self._queue, config, self._shared, self._closing))
        _start_hiding_main(self._proc)
        self.submitted = 0
        self.metrics_submitted = 0
        self._gone_warned = False
        self.dropped = 0  # queue full
        self.dropped_gone = 0  # the exporter process had died (killed, out of memory)
        self.dropped_closed = 0  # submitted after close()
        self.dropped_unread = 0  # still queued when the exporter process ended
        self._closed = False
        self._final: dict[str, int] | None = None
        _LIVE.add(self)

    def submit(self, meta: dict[str, Any], batch: Any) -> bool:
        """Queue one rank's batch for export; False (and a drop counted) when the queue is full,
        after ``close`` or when the exporter process has died (one warning then). True without
        queueing anything when only metrics are exported."""
        if not self.config.has_span_sink:
            return True
        if self._closed:
            self.dropped_closed += 1
            return False
        if not self._alive():
            self.dropped_gone += 1
            return False
        try:
            self._queue.put_nowait((meta, batch))
        except Exception:  # queue.Full, or a closed queue
            self.dropped += 1
            return False
        self.submitted += 1
        return True

    def submit_metrics(self, snapshot: MetricsSnapshot, last: bool = False) -> bool:
        """Queue a metrics snapshot for the metrics endpoint. False, and nothing queued, while the
        previous snapshot is still waiting (one at a time, so metrics never crowd out batches; the
        next snapshot carries the same totals) unless this is the ``last`` one, after ``close`` or
        when the process has died."""
        if not self.config.wants_metrics or self._closed or not self._alive():
            return False
        if not last and self.metrics_submitted > Counters(self._shared).get("metric_snapshots_received"):
            return False
        try:
            self._queue.put_nowait(snapshot)
        except Exception:
            return False
        self.metrics_submitted += 1
        return True

    def _alive(self) -> bool:
        """Whether the exporter process runs; the first time it does not, one warning."""
        if self._proc.is_alive():
            return True
        if not self._gone_warned:
            self._gone_warned = True
            self._count_unread()
            warn(f"exporter process ended unexpectedly (exit code {self._proc.exitcode}); later "
                 "spans and metrics are not exported (spans counted as dropped; they stay in the "
                 "profile folder, `otel-profiler export FOLDER` sends them)")
        return False

    def _count_unread(self) -> None:
        """Batches left in the queue of a process that is gone: dropped, and no longer waiting."""
        received = (self._final or Counters(self._shared).snapshot())["batches_received"]
        self.dropped_unread = max(0, self.submitted - received)

    def counters(self) -> dict[str, int]:
        out = dict(self._final) if self._final is not None else Counters(self._shared).snapshot()
        out["batches_submitted"] = self.submitted
        out["batches_dropped_queue_full"] = self.dropped
        out["batches_dropped_exporter_gone"] = self.dropped_gone
        out["batches_dropped_after_close"] = self.dropped_closed
        out["batches_dropped_unread"] = self.dropped_unread
        return out

    def close(self, timeout_s: float = 10.0) -> dict[str, int]:
        """Flush and stop within ``timeout_s``; returns the final counters. Idempotent."""
        if self._closed:
            return self.counters()
        self._closed = True
        _LIVE.discard(self)
        end = time.monotonic() + timeout_s
        # The child stops sending 80% into the timeout and spools until 95%, so exit fits in the rest.
        now = time.time()
        self._closing[1] = now + 0.95 * timeout_s
        self._closing[0] = now + 0.8 * timeout_s
        if self._proc.is_alive():
            try:
                self._queue.put(None, timeout=max(0.05, 0.5 * timeout_s))
            except Exception:
                pass
        self._proc.join(max(0.0, end - time.monotonic()))
        if self._proc.is_alive():
            warn(f"span exporter did not finish within {timeout_s:g} s; stopping it")
            self._proc.terminate()
            self._proc.join(1.0)
        self._final = Counters(self._shared).snapshot()
        self._count_unread()
        self._queue.cancel_join_thread()
        self._queue.close()
        lost = {"batches (queue full)": self.dropped, "batches (exporter gone)": self.dropped_gone,
                 "batches at close": self._final["batches_dropped_at_close"],
                 "batches never read": self.dropped_unread,
                 "spans": self._final["spans_dropped"]}
        if any(lost.values()):
            warn("span export dropped " + ", ".join(f"{n} {what}" for what, n in lost.items() if n))
        return self.counters()


_LIVE: "weakref.WeakSet[Exporter]" = weakref.WeakSet()


@atexit.register
def _close_at_exit() -> None:
    """Close exporters still open at interpreter exit. Registered when this module is imported,
    i.e. before a profiling session registers its own exit hook, so it runs after the session has
    written (and submitted) its last part."""
    for exporter in list(_LIVE):
        exporter.close()


def exporter_from_env(settings: Any, default_service: str | None = None) -> Exporter | None:
    """An Exporter configured from ``otel_profiler.config.load()``; None when neither an OTLP
    endpoint nor a file sink is configured, or when OTEL_SDK_DISABLED is true."""
    values = settings.values if hasattr(settings, "values") else dict(settings)
    if values.get("OTEL_SDK_DISABLED"):
        return None
    if default_service is None:
        from .resource import script_name

        default_service = script_name()
    config = config_from_settings(settings, default_service)
    if not config.has_sink:
        return None
    return Exporter(config)
