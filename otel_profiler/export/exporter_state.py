"""The memory the training process and its exporter process share: the pipeline's counters and the
close schedule, by name. Neither side takes a lock: each field has one writer (the counters and the
heartbeat: the exporter process; the schedule: ``Exporter.close``), and a reader that sees an old
value only acts a beat later. The counters live here so the job reads them even after the exporter
process was killed."""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass
from multiprocessing.context import SpawnContext
from typing import Any

from .counters import COUNTERS, Counters

HEARTBEAT_S = 0.1
"""The exporter process writes the time (``time.monotonic``, one clock for every process) this often."""


class CloseSchedule(ctypes.Structure):
    """What ``Exporter.close`` tells the exporter process, and the exporter process's heartbeat.
    ``send_until`` is 0 until a close begins."""

    _fields_ = [
        ("send_until", ctypes.c_double),  # wall clock: after it, requests are spooled, not sent
        ("spool_until", ctypes.c_double),  # wall clock: the end of the time given to spool what is left
        ("timeout_s", ctypes.c_double),  # the close's network timeout
        ("heartbeat", ctypes.c_double),  # time.monotonic() of the exporter process's last beat
    ]
    send_until: float
    spool_until: float
    timeout_s: float
    heartbeat: float

    @property
    def closing(self) -> bool:
        return bool(self.send_until)

    def network_deadline(self, ready_at: float) -> float | None:
        """The close's network deadline as a ``time.monotonic`` time; None while not closing. An
        exporter process that became ready (at wall time ``ready_at``) only after the close began
        (a slow start on a busy machine: imports are local work, not a network wait) gets the
        whole close timeout from then on, within the time the job gives it (a little is kept for
        spooling)."""
        if not self.send_until:
            return None
        wall = min(max(self.send_until, ready_at + self.timeout_s), self.spool_until - 2.0)
        return time.monotonic() + (wall - time.time())


@dataclass
class SharedState:
    """The pipeline's counters (an array in ``COUNTERS`` order) and the close schedule, in shared
    memory; handed to the exporter process when it is spawned."""

    counter_values: Any  # a shared ctypes array of int64, one per name of ``COUNTERS``
    schedule: CloseSchedule

    @classmethod
    def create(cls, ctx: SpawnContext) -> SharedState:
        return cls(ctx.RawArray("q", len(COUNTERS)), ctx.RawValue(CloseSchedule))

    @property
    def counters(self) -> Counters:
        return Counters(self.counter_values)
