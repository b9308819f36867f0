"""The session's flush thread: buffered annotations, steps and finished windows become the next part.

A daemon thread polls (never an Event: nothing here may hold a lock that a signal handler in the
main thread could wait for) and writes once ``OTEL_PROFILER_FLUSH_EVENTS`` accumulate, a window
finished, or ``OTEL_PROFILER_FLUSH_INTERVAL_S`` passed. Each part goes to the profile folder
(``output``), to the metrics and to the OTLP exporter (``wiring``). ``Flusher`` is handed the parts
it reads from and writes to by the session.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from cuda_tracer.model.events import EventBatch, Kind
from cuda_tracer.profile import TraceError

from ...profiler_warnings import warn

from ..lifecycle import Lifecycle
from ..output import RankOutput
from ..samples.host_samples import CpuTimeline
from ..steps import markers
from ..trace_context import RunSpan, UserSpans
from ..wiring import ExportWiring
from .capture import DetailedWindows, window_event

FLUSH_POLL_S = 0.2


class Flusher:
    """The flush loop and one flush of one session."""

    def __init__(self, lock: threading.RLock, lifecycle: Lifecycle, windows: DetailedWindows,
                 output: RankOutput, wiring: ExportWiring, cpu_timeline: CpuTimeline,
                 user_spans: UserSpans, run_span: RunSpan, meta: Callable[[], dict[str, Any]],
                 interval_s: float, max_events: int) -> None:
        self.lock = lock  # one writer at a time; the session holds it around fork
        self.lifecycle = lifecycle
        self.windows = windows
        self.output = output
        self.wiring = wiring
        self.cpu_timeline = cpu_timeline
        self.user_spans = user_spans
        self.run_span = run_span
        self.meta = meta
        self.interval_s = interval_s  # OTEL_PROFILER_FLUSH_INTERVAL_S
        self.max_events = max_events  # OTEL_PROFILER_FLUSH_EVENTS
        self.last_flush = time.monotonic()

    def loop(self) -> None:
        """The flush thread's body: poll, start the metrics when due, flush when there is reason."""
        lifecycle, windows = self.lifecycle, self.windows
        while not lifecycle.closed:
            time.sleep(FLUSH_POLL_S)  # polling, not an Event: nothing here may hold a lock that
            if lifecycle.closed:      # a signal handler in the main thread could wait for
                return
            self.wiring.start_metrics_when_due()
            self.cpu_timeline.maybe_sample()
            if (windows.wake or windows.finished or markers.pending() >= self.max_events
                    or time.monotonic() - self.last_flush >= self.interval_s):
                windows.wake = False
                self.flush()

    def flush(self) -> None:
        """Write what is buffered as the next part of this rank (and submit it to the exporter)."""
        lifecycle, output, wiring = self.lifecycle, self.output, self.wiring
        try:
            with self.lock:
                self.last_flush = time.monotonic()
                batches = [markers.drain(output.rank, forget_dead_threads=not lifecycle.in_signal)]
                pending = self.windows.finished
                n = len(pending)  # slice + del: each atomic, so no racing append is lost
                finished = pending[:n]
                del pending[:n]
                for capture, window in finished:  # window None: a part of a window still open
                    if capture is not None:
                        batches.append(_captured_events(capture))
                    if window is not None:
                        batches.append(window_event(window, output.rank))
                if lifecycle.closing and (output.writer.parts or any(len(b) for b in batches)):
                    run = self.run_span.last_event(output.rank, time.time_ns())  # once, in the last part
                    if run is not None:
                        batches.append(run)
                batch = EventBatch.concat(b for b in batches if len(b))
                if not len(batch):
                    return
                if output.writer.parts == 0:
                    settled = output.settle_identity(bool(len(batch.of_kind(Kind.STEP))))
                    if settled is None:
                        return  # a multiprocessing child that has not trained (yet): nothing written
                    if not settled:
                        lifecycle.stop_quietly()
                        return
                batch.columns["rank"][:] = output.rank
                meta = self.meta()
                try:
                    if not output.writer.write(meta, batch):  # another live process holds this rank
                        lifecycle.stop_quietly()
                        return
                except OSError as exc:  # the folder is unusable or the disk full: export goes on
                    output.cannot_write(exc, len(batch))
                if wiring.metrics is not None:
                    wiring.metrics.observe_batch(batch, meta)
                exporter = wiring.exporter_at_first_write()
                if exporter is not None:
                    exporter.submit(_for_export(meta, self.user_spans.take(batch)), batch)
        except Exception as exc:
            lifecycle.fail(exc)


def _captured_events(capture: Any) -> EventBatch:
    """A window's (or a part's) events; a trace torch wrote that no reader takes is left out with
    one warning, and the steps, the annotations and the windows after it are kept."""
    try:
        return capture.to_batch()
    except TraceError as exc:
        warn(f"the events of a detailed window are left out: torch's trace of it could not be read ({exc.problem})")
        return EventBatch.empty()


_NOT_EXPORTED = ("cuda_memory", "cpu_samples")
"""Rank metadata the span exporter never reads (the history of per-step CUDA memory and of CPU
samples, up to a few thousand values): not pickled to the exporter process with every part."""


def _for_export(meta: dict[str, Any], user_spans: dict[int, list[str]]) -> dict[str, Any]:
    """The metadata the exporter gets: without ``_NOT_EXPORTED``, with the job's spans current as the
    batch's steps began (``trace_context``)."""
    out = {k: v for k, v in meta.items() if k not in _NOT_EXPORTED}
    if user_spans:
        out["user_spans"] = user_spans
    return out
