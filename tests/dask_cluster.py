"""A real Dask cluster on loopback for tests and benchmarks: ``dask scheduler`` and ``dask worker``
processes started with their command line (each in its own session, so that stopping one stops its
children), stopped after; waits poll with a generous deadline."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Iterator

DEADLINE_S = 120
PRELOAD = "otel_profiler.cluster.analyse"
"""The module a worker imports at start-up with ``--preload`` (the reader and the analysis)."""
SCHEDULER_PRELOAD = "otel_profiler.cluster.executor"
"""The module the scheduler imports at start-up with ``--preload`` (all it unpickles tasks with)."""
WORKER_ENV = {"DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "False"}
"""Dask's own sampling profiler off, as docs/cluster.md suggests for analysis workers."""


class DaskProcesses:
    """The scheduler and workers of one local cluster; ``address`` once the scheduler is up."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.scheduler_file = self.folder / "scheduler.json"
        self.procs: dict[str, subprocess.Popen] = {}
        self.address = ""

    def _start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        log = open(self.folder / f"{name}.log", "wb")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, **(env or {})})
        log.close()
        self.procs[name] = proc
        return proc

    def start_scheduler(self, preload: bool = True) -> str:
        """The scheduler, as docs/cluster.md starts it; ``preload``: it imports the module tasks are
        unpickled with when it starts, not in the first analysis's graph."""
        self._start("scheduler", ["dask", "scheduler", "--host", "127.0.0.1", "--port", "0",
                                  "--no-dashboard", "--scheduler-file", str(self.scheduler_file),
                                  *(["--preload", SCHEDULER_PRELOAD] if preload else [])])
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            try:
                self.address = json.loads(self.scheduler_file.read_text())["address"]
                return self.address
            except (OSError, ValueError, KeyError):
                if self.procs["scheduler"].poll() is not None:
                    break
                time.sleep(0.2)
        raise RuntimeError(f"dask scheduler did not start: {(self.folder / 'scheduler.log').read_text()[-2000:]}")

    def start_worker(self, name: str, preload: bool = True, dask_profiler: bool = False) -> None:
        """A worker with one thread; ``preload``: it imports the reader when it starts, not in its
        first task; ``dask_profiler``: Dask's sampling profiler left on (its default; off is the way
        docs/cluster.md suggests)."""
        self._start(name, ["dask", "worker", "--scheduler-file", str(self.scheduler_file), "--name", name,
                           "--nthreads", "1", "--no-nanny", "--no-dashboard", "--memory-limit", "0",
                           "--host", "127.0.0.1", *(["--preload", PRELOAD] if preload else [])],
                    env=None if dask_profiler else WORKER_ENV)

    def workers(self) -> dict[str, str]:
        """Worker name -> address, as the scheduler sees them."""
        from distributed import Client

        with Client(self.address, timeout=DEADLINE_S) as client:
            return {w["name"]: addr for addr, w in client.scheduler_info()["workers"].items()}

    def wait_for_workers(self, n: int) -> None:
        from distributed import Client

        with Client(self.address, timeout=DEADLINE_S) as client:
            client.wait_for_workers(n, timeout=DEADLINE_S)

    def pid(self, name: str) -> int:
        return self.procs[name].pid

    def kill(self, name: str) -> None:
        """SIGKILL the process (and its session) ``name``: a worker lost without warning."""
        proc = self.procs.pop(name)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=DEADLINE_S)

    def stop(self) -> None:
        """Every process stopped (workers first), none left behind."""
        for name in sorted(self.procs, key=lambda n: n == "scheduler"):
            proc = self.procs[name]
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=30)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=DEADLINE_S)
        self.procs.clear()

    def __enter__(self) -> "DaskProcesses":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def two_workers(tmp_path_factory) -> Iterator[DaskProcesses]:
    """A real scheduler and two workers on loopback for one test module (the body of a module-scoped
    fixture); none of them left running after."""
    with DaskProcesses(tmp_path_factory.mktemp("dask")) as dask:
        dask.start_scheduler()
        dask.start_worker("w1")
        dask.start_worker("w2", preload=False, dask_profiler=True)  # both ways work
        dask.wait_for_workers(2)
        yield dask
    for proc in dask.procs.values():
        assert proc.poll() is not None
