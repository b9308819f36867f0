"""The session's flush thread: buffered annotations, steps and finished windows become the next part.

A daemon thread polls (never an Event: nothing here may hold a lock that a signal handler in the
main thread could wait for) and writes once ``OTEL_PROFILER_FLUSH_EVENTS`` accumulate, a window
finished, or ``OTEL_PROFILER_FLUSH_INTERVAL_S`` passed. Each part goes to the profile folder
(``output``), to the metrics and to the OTLP exporter. Mixed into ``session.Session``.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from cuda_tracer.model.events import EventBatch

from ..steps import markers
from .capture import window_event
from ..trace_context import run_event

FLUSH_POLL_S = 0.2


class Flushing:
    """The flush loop and one flush (state lives in ``Session.__init__``)."""

    settings: Any
    lock: Any
    closed: bool
    rank: int
    writer: Any
    resource: dict[str, Any]
    metrics: Any
    _in_signal: bool
    _finished: list
    _wake: bool
    _last_flush: float
    _metrics_due: bool
    _metrics_made: bool
    _exporter: Any
    _exporter_made: bool
    _make_exporter: Any
    cpu_timeline: Any
    trace_parent: Any
    run_start_ns: int
    _run_event_sent: bool
    _closing: bool
    user_spans: Any
    _start_metrics: Callable[[], None]  # the rest: the session's other parts (until they are objects)
    _settle_identity: Callable[[], bool]
    _stop_quietly: Callable[[], None]
    meta: Callable[[], dict[str, Any]]
    _cannot_write: Callable[[OSError], None]
    _watch_exporter: Callable[[], None]
    _fail: Callable[[BaseException], None]

    def _flush_loop(self) -> None:
        interval = self.settings["OTEL_PROFILER_FLUSH_INTERVAL_S"]
        limit = self.settings["OTEL_PROFILER_FLUSH_EVENTS"]
        while not self.closed:
            time.sleep(FLUSH_POLL_S)  # polling, not an Event: nothing here may hold a lock that
            if self.closed:           # a signal handler in the main thread could wait for
                return
            if self._metrics_due and not self._metrics_made:
                self._start_metrics()
            self.cpu_timeline.maybe_sample()
            if (self._wake or self._finished or markers.pending() >= limit
                    or time.monotonic() - self._last_flush >= interval):
                self._wake = False
                self.flush()

    def flush(self) -> None:
        """Write what is buffered as the next part of this rank (and submit it to the exporter)."""
        try:
            with self.lock:
                self._last_flush = time.monotonic()
                batches = [markers.drain(self.rank, forget_dead_threads=not self._in_signal)]
                n = len(self._finished)  # slice + del: each atomic, so no racing append is lost
                finished = self._finished[:n]
                del self._finished[:n]
                for capture, window in finished:  # window None: a part of a window still open
                    if capture is not None:
                        batches.append(capture.to_batch())
                    if window is not None:
                        batches.append(window_event(window, self.rank))
                if self._closing and self.trace_parent is not None and not self._run_event_sent \
                        and (self.writer.parts or any(len(b) for b in batches)):
                    self._run_event_sent = True  # the run span: once, in the last part
                    batches.append(run_event(self.run_start_ns, time.time_ns(), self.rank))
                batch = EventBatch.concat(b for b in batches if len(b))
                if not len(batch):
                    return
                if self.writer.parts == 0 and not self._settle_identity():
                    self._stop_quietly()
                    return
                batch.columns["rank"][:] = self.rank
                meta = self.meta()
                try:
                    if not self.writer.write(meta, batch):  # another live process holds this rank
                        self._stop_quietly()
                        return
                except OSError as exc:  # the folder is unusable or the disk full: export goes on
                    self._cannot_write(exc)
                if self.metrics is not None:
                    self.metrics.observe_batch(batch, meta)
                if not self._exporter_made:
                    self._exporter_made = True
                    self._exporter = self._make_exporter(self.settings, self.resource["service.name"])
                    self._watch_exporter()
                if self._exporter is not None:
                    self._exporter.submit(_for_export(meta, self.user_spans.take(batch)), batch)
        except Exception as exc:
            self._fail(exc)


_NOT_EXPORTED = ("cuda_memory", "cpu_samples")
"""Rank metadata the span exporter never reads (the history of per-step CUDA memory and of CPU
samples, up to a few thousand values): not pickled to the exporter process with every part."""


def _for_export(meta: dict, user_spans: dict[int, list[str]]) -> dict:
    """The metadata the exporter gets: without ``_NOT_EXPORTED``, with the job's spans current as the
    batch's steps began (``trace_context``)."""
    out = {k: v for k, v in meta.items() if k not in _NOT_EXPORTED}
    if user_spans:
        out["user_spans"] = user_spans
    return out

