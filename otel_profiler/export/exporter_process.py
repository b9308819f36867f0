"""The exporter process: the pipeline and its sinks, away from the training process's interpreter.

Spawned by ``exporter.Exporter`` (the training side), it reads ``(meta, batch)`` pairs and metrics
snapshots from the queue and hands them to the :class:`otel_profiler.export.pipeline.Pipeline`,
which builds spans, encodes requests and gives them to a sending thread (``export.delivery``), and
each batch's OpenTelemetry profiles to their sender (``export.profiles_config``). It follows the
close schedule the job sets in the shared state (``exporter_state``): read what is queued, send
until the network deadline, spool the rest. It never outlives its job: on Linux it asks for a
parent-death signal (``PR_SET_PDEATHSIG``), and everywhere it watches its parent (multiprocessing's
parent sentinel); when the job is gone it spools what it holds and exits.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import queue as queue_mod
import signal
import sys
import threading
import time
from typing import Any

from ..metrics.points import MetricsSnapshot
from ..profiler_warnings import print_warning
from .export_config import ExportConfig
from .exporter_state import HEARTBEAT_S, CloseSchedule, SharedState
from .pipeline import Pipeline
from .profiles_config import ProfilesConfig, open_sender

log = logging.getLogger(__name__)
_parent_gone = threading.Event()


def _watch_parent(parent_pid: int) -> None:
    """Be told when the job dies, even by SIGKILL: Linux's parent-death signal (SIGUSR1 here; it
    also fires when the job's thread that started us ends, so the handler checks the parent)."""
    def on_signal(signum: int, frame: Any) -> None:
        if os.getppid() != parent_pid:
            _parent_gone.set()

    if sys.platform.startswith("linux"):
        try:
            import ctypes

            signal.signal(signal.SIGUSR1, on_signal)
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGUSR1), 0, 0, 0)  # PR_SET_PDEATHSIG
        except Exception:
            log.debug("the parent-death signal could not be asked for", exc_info=True)
    if os.getppid() != parent_pid:  # died before the signal was asked for
        _parent_gone.set()


def _beat(schedule: CloseSchedule) -> None:
    """Tell the job this process is alive (a thread of its own: a sending thread waiting on the
    network, or encoding, never stops it)."""
    while True:
        schedule.heartbeat = time.monotonic()
        time.sleep(HEARTBEAT_S)


def run_exporter_process(queue: Any, config: ExportConfig, state: SharedState, parent_pid: int = 0,
                         profiles: ProfilesConfig | None = None) -> None:
    """The exporter process: read batches until the sentinel or the job's end, then settle what it
    holds within the close schedule ``Exporter.close`` set (``state.schedule``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's; close() ends us
    schedule = state.schedule
    threading.Thread(target=_beat, args=(schedule,), name="otel-profiler-heartbeat", daemon=True).start()
    if parent_pid:
        _watch_parent(parent_pid)
    counters = state.counters
    ready_at = [0.0]  # when this process could first send (wall clock), set below

    def network_deadline() -> float | None:
        return schedule.network_deadline(ready_at[0])

    try:
        pipeline: Pipeline | None = Pipeline(config, counters, threaded=True,
                                             closing_deadline=network_deadline)
    except Exception as exc:  # e.g. unreadable certificate file
        print_warning(f"span exporter cannot start ({exc.__class__.__name__}: {exc}); spans are dropped")
        pipeline = None
    sender = open_sender(profiles, print_warning, network_deadline)
    ready_at[0] = time.time()
    parent = mp.parent_process()
    errors: set[str] = set()
    while not _parent_gone.is_set():
        try:
            item = queue.get(timeout=0.2 if schedule.closing else 1.0)
        except queue_mod.Empty:
            if parent is not None and not parent.is_alive():
                _parent_gone.set()
            elif schedule.spool_until and time.time() >= schedule.spool_until:
                break  # no sentinel came (the queue stayed full): what is left was never read
            continue
        except (EOFError, OSError):
            break
        if item is None:
            break
        is_metrics = isinstance(item, MetricsSnapshot)
        counters.add("metric_snapshots_received" if is_metrics else "batches_received")
        if pipeline is None:
            counters.add("metric_requests_failed" if is_metrics else "batches_failed")
            continue
        try:
            if is_metrics:
                pipeline.handle_metrics(item)
            else:
                pipeline.handle(*item)
                counters.add("batches_finished")
                sender.handle_safely(*item)
        except Exception as exc:
            counters.add("metric_requests_failed" if is_metrics else "batches_failed")
            key = f"{exc.__class__.__name__}: {exc}"[:200]
            if key not in errors:
                errors.add(key)
                print_warning(f"{'metrics' if is_metrics else 'span'} export failed ({key})")
    if pipeline is not None:
        if _parent_gone.is_set() and pipeline.delivery is not None:
            pipeline.delivery.persist_now()  # the job is gone: no network, keep what we hold
        pipeline.close(network_deadline() if not _parent_gone.is_set() else time.monotonic())
    sender.close_and_report(network_deadline() if not _parent_gone.is_set() else time.monotonic())
    try:
        sys.stderr.flush()
    finally:
        os._exit(0)  # a sending thread may still sit in a network call: do not wait for it
