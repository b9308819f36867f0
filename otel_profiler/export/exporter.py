"""The exporter, training-process side: EventBatches and metrics in through a bounded queue to the
exporter process (``exporter_process``), OTLP out; training never waits.

:class:`Exporter` and :func:`exporter_from_settings` import no protobuf, grpc or encoder: ``submit``
puts ``(meta, batch)`` and ``submit_metrics`` a ``MetricsSnapshot`` on a bounded ``multiprocessing``
queue without blocking; when the queue is full (the exporter process is behind) the batch is kept
and merged into the next one, up to ``HOLD_ROWS`` events, beyond which it is dropped and counted.
The exporter process is *spawned* (``__main__`` hidden, so the training script never re-runs), and
shares its counters and the close schedule with this side (``exporter_state.SharedState``).

Closing (``close(timeout_s)``, the job's exit): the exporter process reads every batch still queued, keeps
sending while the endpoint answers for at most ``timeout_s`` seconds (giving up at once on a failing
endpoint), then spools every request not acknowledged (local and fast); only if that local work takes more
than ``PERSIST_S`` more is it stopped, and what it had not settled is counted lost with its reason (batches
never read, batches cut short, spans not persisted). A frozen exporter process (stopped, or neither beating
nor using CPU) is killed at once. Exporters still open at exit are closed by one exit hook registered at
import, so after a session's own hook has written its last part.

A dead exporter process (killed, out of memory) costs one warning; later batches are counted as dropped
(they stay in the profile folder). When spans wait in the spool at close, one line names the spool and
the ``otel-profiler replay`` command that sends them (:func:`replay_hint`). With
``OTEL_PROFILER_PROFILES_EXPORTER=otlp`` the exporter process also sends each batch's OpenTelemetry
profiles (``export.profiles_config``) within the same close deadline.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing as mp
import multiprocessing.util  # noqa: F401  (its exit hook, registered first, must run after ours)
from multiprocessing.process import BaseProcess
import os
import queue as queue_mod
import shlex
import sys
import threading
import time
import weakref
from typing import Any

from cuda_tracer.model.events import EventBatch
from cuda_tracer.private_files import open_in_private_dir

from ..config import Settings
from ..metrics.points import MetricsSnapshot
from ..profiler_warnings import print_warning
from ..spans.context import merged_meta
from .export_config import ExportConfig, export_config_from_settings
from .exporter_state import HEARTBEAT_S, SharedState
from .profiles_config import profiles_config
from .profiles_target import ProfilesConfig

log = logging.getLogger(__name__)
HOLD_ROWS = 2_000_000
"""Events kept in the training process while the queue is full (merged into the next batch);
beyond this many, the batch is dropped and counted (``batches_dropped_queue_full``)."""
PERSIST_S = 30.0
"""At close, after the network deadline: the most the exporter process may take to spool what it
holds (milliseconds normally; a cap for a machine that is swapping)."""
DELIVERY_NOTES = "delivery-at-exit.{pid}.txt"
"""In the profile folder: the lines a process's exporter said at close (spans spooled, batches lost)."""
FEEDER_END_S = 0.5
"""At close, the most the queue's feeder thread is waited for (it ends at once normally)."""
FROZEN_S = 1.0
"""At close, an exporter process whose heartbeat is older than this, or that is stopped (SIGSTOP,
a debugger), is frozen: it is killed at once and the job does not wait for it."""


def _start_hiding_main(proc: BaseProcess) -> None:
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

    def __init__(self, config: ExportConfig, profiles: ProfilesConfig | None = None) -> None:
        from .exporter_process import run_exporter_process

        ctx = mp.get_context("spawn")
        self.config = config
        self._queue: Any = ctx.Queue(config.queue_size)  # None once closed
        self._state = SharedState.create(ctx)  # its counters, and the close schedule
        self._proc = ctx.Process(target=run_exporter_process, name="otel-profiler-exporter", daemon=True,
                                 args=(self._queue, config, self._state, os.getpid(), profiles))
        _start_hiding_main(self._proc)
        self.submitted = self.metrics_submitted = 0
        self._gone_warned = False
        self.dropped = 0  # queue full
        self.dropped_gone = 0  # the exporter process had died (killed, out of memory)
        self.dropped_closed = 0  # submitted after close()
        self.dropped_unread = 0  # still queued when the exporter process ended
        self.cut_short = 0  # read, but the exporter process ended before it settled their spans
        self._held: EventBatch | None = None  # batches merged while the queue was full, sent with the next one
        self._held_meta: dict[str, Any] = {}
        self._held_parts = 0
        self._closed = False
        self._final: dict[str, int] | None = None
        self.profile_folder: str | None = None  # named in the line at close when batches were lost
        self.frozen = False  # found frozen at close, and killed
        self._cpu_seen, self._cpu_moved = -1, time.monotonic()  # its CPU time, and when it last moved
        _LIVE.add(self)

    def submit(self, meta: dict[str, Any], batch: EventBatch) -> bool:
        """Queue one rank's batch for export, or hold it for the next submit (merged) while the
        queue is full. False (and a drop counted) when the held events would pass ``HOLD_ROWS``,
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
        held, self._held = self._held, None
        if held is not None:  # an earlier batch found the queue full: it goes first, merged
            batch, meta = EventBatch.concat([held, batch]), merged_meta(self._held_meta, meta)
        try:
            self._queue.put_nowait((meta, batch))
        except queue_mod.Full:  # the exporter process is behind (a slow start, a busy machine)
            if len(batch) > HOLD_ROWS:
                self.dropped += 1 + self._held_parts
                self._held_parts = 0
                return False
            self._held, self._held_meta = batch, meta
            self._held_parts += 1
            return True
        except Exception:  # a closed queue
            log.debug("a span batch could not be queued (closed queue); it is dropped", exc_info=True)
            self.dropped += 1 + self._held_parts
            self._held_parts = 0
            return False
        self.submitted += 1
        self._held_parts = 0
        return True

    @property
    def wants_metrics(self) -> bool:
        """Whether metrics snapshots go anywhere (an OTLP metrics endpoint, or the console)."""
        return self.config.wants_metrics

    def submit_metrics(self, snapshot: MetricsSnapshot, last: bool = False) -> bool:
        """Queue a metrics snapshot for the metrics endpoint. False, and nothing queued, while the
        previous snapshot is still waiting (one at a time, so metrics never crowd out batches; the
        next snapshot carries the same totals) unless this is the ``last`` one, after ``close`` or
        when the process has died."""
        if not self.wants_metrics or self._closed or not self._alive():
            return False
        if not last and self.metrics_submitted > self._state.counters.get("metric_snapshots_received"):
            return False
        try:
            self._queue.put_nowait(snapshot)
        except Exception:
            log.debug("a metrics snapshot could not be queued", exc_info=True)
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
            print_warning(f"exporter process ended unexpectedly (exit code {self._proc.exitcode}); later "
                 "spans and metrics are not exported (spans counted as dropped; they stay in the "
                 "profile folder, `otel-profiler export FOLDER` sends them)")
        return False

    def _count_unread(self) -> None:
        """Batches left in the queue of a process that is gone: dropped, and no longer waiting;
        and batches it had read but not turned into requests yet."""
        c = self._final or self._state.counters.snapshot()
        self.dropped_unread = max(0, self.submitted - c["batches_received"])
        self.cut_short = max(0, c["batches_received"] - c["batches_finished"] - c["batches_failed"])

    def counters(self) -> dict[str, int]:
        out = dict(self._final) if self._final is not None else self._state.counters.snapshot()
        out["batches_submitted"] = self.submitted
        out["batches_dropped_queue_full"] = self.dropped
        out["batches_dropped_exporter_gone"] = self.dropped_gone
        out["batches_dropped_after_close"] = self.dropped_closed
        out["batches_dropped_unread"] = self.dropped_unread
        out["batches_dropped_cut_short"] = self.cut_short
        return out

    def close(self, timeout_s: float = 10.0) -> dict[str, int]:
        """Flush and stop: network waits end after ``timeout_s``, then what is not acknowledged is
        spooled (within ``PERSIST_S`` more). Returns the final counters. Idempotent."""
        if self._closed:
            return self.counters()
        self._closed = True
        _LIVE.discard(self)
        now, schedule = time.time(), self._state.schedule
        schedule.timeout_s = timeout_s
        schedule.spool_until = now + timeout_s + PERSIST_S
        schedule.send_until = now + timeout_s  # last: the exporter process reads it as "closing"
        end = time.monotonic() + timeout_s + PERSIST_S
        if self._held is not None and self._proc.is_alive():
            if self._put((self._held_meta, self._held), end):
                self.submitted += 1
            else:
                self.dropped += self._held_parts
            self._held = None
        if self._proc.is_alive():
            self._put(None, end)
        while self._proc.is_alive() and time.monotonic() < end and not self._is_frozen():
            self._proc.join(min(HEARTBEAT_S, max(0.0, end - time.monotonic())))
        stopped = self._proc.is_alive()
        if stopped:
            self.frozen = self._is_frozen()
            if not self.frozen:
                print_warning(f"span exporter did not finish spooling within {timeout_s + PERSIST_S:g} s; "
                              "stopping it")
            self._stop_process()
        self._final = self._state.counters.snapshot()
        self._count_unread()
        if not stopped and self._proc.exitcode == 0:
            self._final["spans_pending"] = self._final["requests_pending"] = 0
        self._release_queue()
        lost = {"batches (queue full)": self.dropped, "batches (exporter gone)": self.dropped_gone,
                "batches never read": self.dropped_unread,
                "batches read but not exported (exporter stopped)": self.cut_short,
                "spans not yet sent or spooled (exporter stopped)": self._final["spans_pending"],
                "spans": self._final["spans_dropped"]}
        dropped = ", ".join(f"{n} {what}" for what, n in lost.items() if n)
        lines = []
        if self.frozen:  # whatever it had not confirmed is in the profile folder: one line, the command
            lines.append("span exporter process was frozen (stopped or not responding) at exit and was "
                         "killed so the job could end" + (f"; span export dropped {dropped}" if dropped else "")
                         + self._export_hint())
        elif dropped:  # the command only for what a dead exporter lost (the folder has it)
            process_lost = self.dropped_gone or self.dropped_unread or self.cut_short or self._final["spans_pending"]
            lines.append("span export dropped " + dropped + (self._export_hint() if process_lost else ""))
        if self._final["spool_bytes"] > 0 and self.config.target is not None:
            lines.append(replay_hint(self.config, self._final["spans_spooled"]))
        for line in lines:
            print_warning(line)
        self._record(lines)
        return self.counters()

    def _release_queue(self) -> None:
        """Close the queue and let its semaphores go now. Its feeder thread holds two of them
        until it ends, so it gets a moment (``FEEDER_END_S``: the exporter process has ended, so
        a write finds no reader and ends at once). Else, after an ``os._exit``, multiprocessing's
        resource tracker would tell the job's stderr of "leaked semaphore objects"."""
        queue, self._queue = self._queue, None
        queue.cancel_join_thread()
        queue.close()
        feeder = getattr(queue, "_thread", None)
        if feeder is not None and feeder is not threading.current_thread():
            feeder.join(FEEDER_END_S)

    def _record(self, lines: list[str]) -> None:
        """Keep the lines said at close in the profile folder (``DELIVERY_NOTES``), so that
        ``otel-profiler run`` can repeat them last, after its summary. Never raises."""
        if not lines or self.profile_folder is None:
            return
        try:
            with open_in_private_dir(self.profile_folder, DELIVERY_NOTES.format(pid=os.getpid()), "a") as f:
                f.write("".join(line + "\n" for line in lines))
        except Exception:
            log.debug("the failed-export record could not be written", exc_info=True)

    def _put(self, item: Any, end: float) -> bool:
        """Queue ``item`` for the exporter process before ``end``, giving up at once when it is
        frozen (a full queue would otherwise hold the job until ``end``)."""
        while time.monotonic() < end:
            try:
                self._queue.put(item, timeout=min(HEARTBEAT_S, max(0.01, end - time.monotonic())))
                return True
            except queue_mod.Full:
                if not self._proc.is_alive() or self._is_frozen():
                    return False
            except Exception:
                log.debug("checking the exporter process failed", exc_info=True)
                return False
        return False

    def _is_frozen(self) -> bool:
        """The exporter process is stopped (SIGSTOP, a debugger), or neither beats nor uses CPU:
        its heartbeat is older than ``FROZEN_S`` and its CPU time has not moved for as long (a
        process busy in one long call that holds its interpreter, a large import on a loaded
        machine, is not frozen; one that has not begun beating is still starting)."""
        state, cpu = _process_state(self._proc.pid)
        if state in ("T", "t"):
            return True
        now = time.monotonic()
        if cpu != self._cpu_seen:
            self._cpu_seen, self._cpu_moved = cpu, now
        beat = self._state.schedule.heartbeat
        return beat > 0 and now - beat > FROZEN_S and now - self._cpu_moved > FROZEN_S

    def _stop_process(self) -> None:
        """Kill the exporter process and leave it at once if it does not die (the job never waits
        for it again, neither here nor in multiprocessing's exit hook). What it had not settled
        is counted by the caller; the profile folder still holds every batch."""
        for stop in (self._proc.terminate, self._proc.kill) if not self.frozen else (self._proc.kill,):
            stop()
            self._proc.join(1.0)
            if not self._proc.is_alive():
                return
        try:
            mp.process._children.discard(self._proc)  # type: ignore[attr-defined]
        except Exception:
            log.debug("the exporter process could not be forgotten by multiprocessing", exc_info=True)

    def _export_hint(self) -> str:
        """The command that sends what was lost: the profile folder keeps every batch."""
        if self.profile_folder is None or self.config.target is None:
            return " (the profile folder keeps them: `otel-profiler export FOLDER` sends them)"
        from ..shared.otlp_target import redact_url

        command = (f"otel-profiler export {_shell_arg(self.profile_folder)} "
                   f"--endpoint {_shell_arg(redact_url(self.config.target.endpoint))}")
        if self.config.target.protocol != "http/protobuf":
            command += f" --protocol {self.config.target.protocol}"
        return f"; the profile folder keeps them, send them with: {command}"


def _process_state(pid: int | None) -> tuple[str, int]:
    """A process's state letter and CPU time in clock ticks from ``/proc`` (``("", 0)`` where that
    cannot be read: then only the heartbeat tells)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return fields[0].decode(), int(fields[11]) + int(fields[12])  # state, utime + stime
    except (OSError, IndexError, ValueError):
        return "", 0


def _shell_arg(text: str) -> str:
    """A word of a command line shown to the user: quoted, control characters as ``?``."""
    return shlex.quote("".join(c if c.isprintable() else "?" for c in text))


def replay_hint(config: ExportConfig, spooled: int) -> str:
    """The line at exit when spans wait in the spool: where, and the command that sends them."""
    from ..shared.otlp_target import redact_url

    arg, target = _shell_arg, config.target
    endpoint = redact_url(target.endpoint) if target is not None else "URL"  # (only said with a target)
    command = f"otel-profiler replay {arg(config.spool_dir)} --endpoint {arg(endpoint)}"
    if target is not None and target.protocol != "http/protobuf":
        command += f" --protocol {target.protocol}"
    return f"{spooled} spans were not delivered and wait in the spool {arg(config.spool_dir)}; " \
           f"send them with: {command}"


_LIVE: "weakref.WeakSet[Exporter]" = weakref.WeakSet()


@atexit.register
def _close_at_exit() -> None:
    """Close exporters still open at interpreter exit. Registered when this module is imported,
    i.e. before a profiling session registers its own exit hook, so it runs after the session has
    written (and submitted) its last part."""
    for exporter in list(_LIVE):
        exporter.close()


def exporter_from_settings(settings: Settings, default_service: str | None = None) -> Exporter | None:
    """An Exporter configured from the settings (``otel_profiler.config.load()``); None when neither
    an OTLP endpoint nor a file sink is configured, or when OTEL_SDK_DISABLED is true."""
    if settings.otel_sdk_disabled:
        return None
    config = export_config_from_settings(settings, default_service or settings.service_name)
    if not config.has_sink:
        return None
    return Exporter(config, profiles_config(settings, config))

