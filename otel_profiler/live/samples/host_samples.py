"""CPU utilization over time of a profiled run, kept in the rank's metadata (``cpu_samples``) so the
profile folder holds it: the machine's busy share of all its cores and this process's share of the
cores it may use, sampled by the session's flush thread from psutil's CPU times (deltas between
samples, with its own state: the metrics sampler's readings are not disturbed).

At most ``MAX_SAMPLES`` samples are kept: when full, every other one is dropped and the interval
doubles, so a long run keeps an even, bounded timeline."""

from __future__ import annotations

import logging
import time
from typing import Any

from ...metrics.system import process_cpu_share, usable_cores

log = logging.getLogger(__name__)

MAX_SAMPLES = 1200


class CpuTimeline:
    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.t: list[float] = []  # unix seconds
        self.system_pct: list[float] = []
        self.process_pct: list[float] = []
        self.cores = 0
        self._ps: Any = None
        self._last: tuple[float, float, float, float] | None = None  # (wall, busy, total, process)
        self._next = 0.0
        self._off = interval_s <= 0

    def _reading(self) -> tuple[float, float, float, float]:
        ps, proc = self._ps
        times = ps.cpu_times()
        idle = times.idle + getattr(times, "iowait", 0.0)
        total = sum(times)
        p = proc.cpu_times()
        return time.monotonic(), total - idle, total, p.user + p.system

    def maybe_sample(self) -> None:
        """Take a sample when the interval has passed. Never raises (psutil failing turns it off)."""
        if self._off or time.monotonic() < self._next:
            return
        try:
            if self._ps is None:
                import psutil

                proc = psutil.Process()
                self._ps = (psutil, proc)
                self.cores = usable_cores(psutil, proc)
            now = self._reading()
        except Exception:
            log.debug("host samples are off: the first reading failed", exc_info=True)
            self._off = True
            return
        self._next = now[0] + self.interval_s
        if self._last is not None and now[2] > self._last[2]:
            self.t.append(time.time())
            self.system_pct.append(round(100.0 * (now[1] - self._last[1]) / (now[2] - self._last[2]), 2))
            share = process_cpu_share(now[3] - self._last[3], now[0] - self._last[0], self.cores)
            self.process_pct.append(round(100.0 * share, 2))
            if len(self.t) > MAX_SAMPLES:
                self.t, self.system_pct, self.process_pct = \
                    self.t[::2], self.system_pct[::2], self.process_pct[::2]
                self.interval_s *= 2
        self._last = now

    def meta(self) -> dict[str, Any]:
        """``{interval_s, cores, t, system_pct, process_pct}``; empty before the second sample."""
        if not self.t:
            return {}
        return {"interval_s": self.interval_s, "cores": self.cores, "t": list(self.t),
                "system_pct": list(self.system_pct), "process_pct": list(self.process_pct)}
