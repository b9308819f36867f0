"""Per-thread recording of annotations and steps as cheap timestamps, drained into EventBatches.

The hot path (``otel_profiler.api``) appends one tuple per finished range to a list owned by the
calling thread: no lock, no OpenTelemetry object, one ``perf_counter_ns`` at each end. A drain (from
the session's flush thread, a window end or exit) moves every thread's finished ranges into one
``EventBatch`` of kind ``USER_ANNOTATION`` / ``STEP``. Moving uses ``lst[:n]`` then ``del lst[:n]``,
each atomic under the GIL, so a thread appending meanwhile never loses an event.

``perf_counter_ns`` (monotonic) is mapped to Unix-epoch ns with an offset re-measured at each drain.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import numpy as np

from cuda_tracer.model.events import COLUMNS, MISSING, EventBatch, Kind
from cuda_tracer.model.string_table import StringTable

ANNOTATION = int(Kind.USER_ANNOTATION)
STEP = int(Kind.STEP)

active = False
"""True while a session records; the API checks it before appending anything."""

nvtx: tuple | None = None
"""``(range_push, range_pop, range_start, range_end)`` of ``torch.cuda.nvtx`` while annotations are
also NVTX ranges (``OTEL_PROFILER_NVTX=true`` and a GPU; set by ``torch_steps``), else None."""


class ThreadLog(threading.local):
    """One thread's finished ranges (``events``) and the starts of its open ranges (``stack``)."""

    def __init__(self) -> None:
        self.events: list[tuple] = []
        self.stack: list[int] = []
        self.tid = threading.get_native_id()
        with _logs_lock:
            _logs.append((self.tid, self.events))


_logs_lock = threading.Lock()
_logs: list[tuple[int, list[tuple]]] = []
local = ThreadLog()


def pending() -> int:
    """How many finished ranges wait to be drained (approximate, lock-free)."""
    return sum(len(events) for _, events in _logs)


def epoch_offset_ns() -> int:
    """``time_ns() - perf_counter_ns()``, taken from the tightest of three samples."""
    samples = []
    for _ in range(3):
        a = time.perf_counter_ns()
        wall = time.time_ns()
        b = time.perf_counter_ns()
        samples.append((b - a, wall - (a + b) // 2))
    return min(samples, key=lambda sample: sample[0])[1]


def drain(rank: int = MISSING, forget_dead_threads: bool = True) -> EventBatch:
    """Every finished range of every thread, as one batch (removed from the thread logs).

    Safe from a signal handler with ``forget_dead_threads=False``: the registry lock is only
    waited for briefly (the interrupted thread may hold it) and ``threading.enumerate`` is skipped.
    """
    taken: list[tuple[int, list[tuple]]] = []
    locked = _logs_lock.acquire(timeout=0.5)
    try:
        logs = list(_logs)
    finally:
        if locked:
            _logs_lock.release()
    for tid, events in logs:
        n = len(events)
        if n:
            items = events[:n]
            del events[:n]
            taken.append((tid, items))
    if forget_dead_threads:
        _forget_dead_threads()
    return to_batch(taken, epoch_offset_ns(), os.getpid(), rank)


def to_batch(taken: list[tuple[int, list[tuple]]], offset_ns: int, pid: int, rank: int) -> EventBatch:
    """Build a batch from ``(tid, [(kind, name, start, end, extra), ...])`` groups.

    ``extra`` is the step number for steps and the attribute dict (or None) for annotations.
    """
    kinds: list[int] = []
    names: list[int] = []
    starts: list[int] = []
    ends: list[int] = []
    tids: list[int] = []
    table = StringTable()
    extras: list[tuple[int, str, Any]] = []
    row = 0
    for tid, items in taken:
        for kind, name, start, end, extra in items:
            kinds.append(kind)
            names.append(table.intern(name))
            starts.append(start)
            ends.append(end)
            tids.append(tid)
            if kind == STEP:
                extras.append((row, "step", extra))
            elif extra:
                for key, value in extra.items():
                    extras.append((row, str(key), _plain(value)))
            row += 1
    n = len(kinds)
    columns = {c: np.full(n, MISSING if dt.kind == "i" else 0, dt) for c, dt in COLUMNS.items()}
    if n:
        columns["kind"] = np.asarray(kinds, np.uint8)
        columns["name"] = np.asarray(names, np.int32)
        columns["start_ns"] = np.asarray(starts, np.int64) + offset_ns
        columns["end_ns"] = np.asarray(ends, np.int64) + offset_ns
        columns["tid"] = np.asarray(tids, np.int64)
        columns["pid"][:] = pid
        columns["rank"][:] = rank
    key_ids = [table.intern(key) for _, key, _ in extras]
    return EventBatch(columns, table.strings, np.asarray([r for r, _, _ in extras], np.int64),
                      np.asarray(key_ids, np.int32), [v for _, _, v in extras])


def _plain(value: Any) -> Any:
    """A JSON-safe attribute value: numbers, strings and booleans stay, the rest becomes text."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


def _forget_dead_threads() -> None:
    alive = {t.native_id for t in threading.enumerate()}
    with _logs_lock:
        _logs[:] = [(tid, ev) for tid, ev in _logs if ev or tid in alive]


def reset_after_fork() -> None:
    """In a forked child: drop the parent's buffered ranges (the parent writes them) and its threads."""
    global _logs_lock
    _logs_lock = threading.Lock()  # another parent thread may have held it at fork time
    for _, events in _logs:
        events.clear()
    _logs.clear()
    events = local.events  # first touch in this thread registers it
    local.tid = threading.get_native_id()
    if not any(ev is events for _, ev in _logs):
        _logs.append((local.tid, events))
