"""CPU utilization over time of a profiled run, kept in the rank's metadata (``cpu_samples``) so the
profile folder holds it: the machine's busy share of all its cores, this process's share of the
cores it may use, and the cores the job's other processes kept busy (``job_cores``: the process tree
of the job's root, this process left out: its DataLoader workers and children, sibling ranks and the
launcher), sampled by the session's flush thread from psutil's CPU times (deltas between samples,
with its own state: the metrics sampler's readings are not disturbed).

The job's root (``job_root``) is the ``otel-profiler run`` process (it says so in ``JOB_ROOT_ENV``),
else the parent of a multiprocessing child or of a rank a launcher started (``LOCAL_RANK``), else
this process. No session passes its root on: a program started by a profiled program (a test
runner's, a notebook's) is a job of its own.

At most ``MAX_SAMPLES`` samples are kept: when full, every other one is dropped and the interval
doubles, so a long run keeps an even, bounded timeline."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from ...metrics.system import process_cpu_share, usable_cores
from ..child_processes import JOB_ROOT_ENV

log = logging.getLogger(__name__)

MAX_SAMPLES = 1200
FINAL_SAMPLE_MIN_S = 0.1  # a last, partial interval shorter than this is left out


def job_root(child_of_run: bool) -> int:
    """The pid whose process tree is this job (see the module docstring). ``child_of_run``: this
    process is a multiprocessing child of a profiled process (its parent is the job's root)."""
    try:
        return int(os.environ.get(JOB_ROOT_ENV, ""))
    except ValueError:
        return os.getppid() if child_of_run or "LOCAL_RANK" in os.environ else os.getpid()


class JobProcesses:
    """CPU seconds the job's other processes used between two readings (a process that ended
    between them takes its last interval with it; one that began counts from its start)."""

    def __init__(self, psutil: Any, root: int) -> None:
        self._psutil = psutil
        self._root = root
        self._me = os.getpid()
        self._last: dict[tuple[int, float], float] = {}  # (pid, create time) -> CPU seconds
        self._primed = False  # a first reading was taken

    def cpu_since_last(self) -> float:
        psutil = self._psutil
        try:
            root = psutil.Process(self._root)
            tree = [root, *root.children(recursive=True)]
        except Exception:  # not logged: the root ended (a launcher gone); this process's children remain
            try:
                tree = psutil.Process(self._me).children(recursive=True)
            except Exception:  # not logged: an unreadable process table reads as no other processes
                tree = []
        now: dict[tuple[int, float], float] = {}
        used = 0.0
        for proc in tree:
            if proc.pid == self._me:
                continue
            try:
                key = (proc.pid, proc.create_time())
                times = proc.cpu_times()
            except Exception:  # not logged: the process ended meanwhile
                continue
            now[key] = seconds = times.user + times.system
            used += seconds - self._last.get(key, 0.0)
        first, self._primed = not self._primed, True
        self._last = now
        return 0.0 if first else max(0.0, used)


class CpuTimeline:
    """The samples of one session; ``root``: the pid of the job's root (``job_root``; this process
    when not given)."""

    def __init__(self, interval_s: float, root: int | None = None) -> None:
        self.interval_s = interval_s
        self.root = os.getpid() if root is None else root
        self.t: list[float] = []  # unix seconds
        self.system_pct: list[float] = []
        self.process_pct: list[float] = []
        self.job_cores: list[float] = []  # the job's other processes, in cores
        self.cores = 0
        self._ps: Any = None
        self._last: tuple[float, float, float, float] | None = None  # (wall, busy, total, process)
        self._job: JobProcesses | None = None
        self._next = 0.0
        self._off = interval_s <= 0

    def _reading(self) -> tuple[float, float, float, float]:
        ps, proc = self._ps
        times = ps.cpu_times()
        idle = times.idle + getattr(times, "iowait", 0.0)
        total = sum(times)
        p = proc.cpu_times()
        return time.monotonic(), total - idle, total, p.user + p.system

    def maybe_sample(self, final: bool = False) -> None:
        """Take a sample when the interval has passed, or (``final``, at the session's close) the
        part of an interval since the last reading, so that a run shorter than one interval still
        has its sample. Never raises (psutil failing turns it off)."""
        if self._off or (not final and time.monotonic() < self._next):
            return
        if final and (self._last is None or time.monotonic() - self._last[0] < FINAL_SAMPLE_MIN_S):
            return  # no reading to measure from, or too short a time to say anything
        try:
            if self._ps is None:
                import psutil

                proc = psutil.Process()
                self._ps = (psutil, proc)
                self.cores = usable_cores(psutil, proc)
                self._job = JobProcesses(psutil, self.root)
            now = self._reading()
            job_cpu = self._job.cpu_since_last() if self._job is not None else 0.0
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
            self.job_cores.append(round(job_cpu / max(now[0] - self._last[0], 1e-9), 3))
            if len(self.t) > MAX_SAMPLES:
                self.t, self.system_pct, self.process_pct, self.job_cores = \
                    self.t[::2], self.system_pct[::2], self.process_pct[::2], self.job_cores[::2]
                self.interval_s *= 2
        self._last = now

    def meta(self) -> dict[str, Any]:
        """``{interval_s, cores, t, system_pct, process_pct, job_cores}``; empty before the second
        sample."""
        if not self.t:
            return {}
        return {"interval_s": self.interval_s, "cores": self.cores, "t": list(self.t),
                "system_pct": list(self.system_pct), "process_pct": list(self.process_pct),
                "job_cores": list(self.job_cores)}
