"""Processes a job starts itself, and which of them are processes of the run.

- A **forked child** (``os.fork``, ``multiprocessing`` with the fork start method: DataLoader workers,
  Hogwild trainers, an older torch's Inductor compile workers) records nothing and writes nothing
  (``hygiene``) until it trains: the torch hooks it inherited report to a :class:`SleepingChild`,
  whose first optimizer step or backward pass starts a session of the child's own in the parent's
  profile folder. A child that never trains pays nothing.
- A **spawned multiprocessing child** (``--multiprocessing-fork`` on its command line: ``mp.spawn``,
  the spawn start method) starts its session like any process, in the parent's folder
  (:func:`inherited_run`), and writes only once it has recorded a step.
- Either kind without a rank of its own (no ``RANK``, no process group) takes the next free rank
  number from the world size up (``output.RankWriter``), so a Hogwild job's trainers are ranks 1, 2, …
  beside the parent's rank 0.

The parent tells its children its run id and folder through ``RUN_ENV`` (set by each session; a
new program started with the profiler on drops a value it inherited, and so does ``otel-profiler
run``: the run of the program that started it is not its run).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, Callable

log = logging.getLogger(__name__)

JOB_ROOT_ENV = "_OTEL_PROFILER_JOB_ROOT"
"""The pid of ``otel-profiler run``, said to the job it starts, for the CPU samples of the job's own
processes (``samples.host_samples``); no session sets it."""
RUN_ENV = "_OTEL_PROFILER_RUN"
"""``<run id>/<absolute profile folder>`` of the job's first session, for its multiprocessing children."""


def is_spawned_child() -> bool:
    """This process was started by ``multiprocessing``'s spawn or forkserver start method."""
    return "--multiprocessing-fork" in getattr(sys, "orig_argv", sys.argv)


def announce_run(run_id: str, folder: str) -> None:
    """Let the job's multiprocessing children write into this run (a value inherited from an earlier
    job, one that started this program, is replaced)."""
    os.environ[RUN_ENV] = f"{run_id}/{folder}"


def inherited_run() -> tuple[str, str] | None:
    """The parent's run id and folder, in a spawned multiprocessing child of a profiled job."""
    value = os.environ.get(RUN_ENV, "")
    run_id, _, folder = value.partition("/")
    if not (run_id and folder and is_spawned_child()):
        return None
    return run_id, folder


def children_trained(folder: str) -> bool:
    """Whether a multiprocessing child of this process wrote steps into ``folder`` (a Hogwild
    parent that only starts and joins its trainers)."""
    import json

    me = os.getpid()
    try:
        names = [n for n in os.listdir(folder) if n.startswith("rank-") and n.endswith(".json")]
    except OSError:
        return False
    for name in names:
        try:
            with open(os.path.join(folder, name)) as f:
                meta = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(meta, dict) and meta.get("parent_pid") == me and meta.get("steps"):
            return True
    return False


class SleepingChild:
    """The torch hooks' sink in a forked child until it trains: module calls, new optimizers and
    profiler scopes are ignored; the first optimizer step or backward pass ``wake``s a session (the
    child's own, made by ``start``), which takes the hooks over and gets that report."""

    wants_nvtx = False

    def __init__(self, start: Callable[[], Any]) -> None:
        self._start = start
        self._session: Any = None
        self._woken = False

    def _wake(self) -> Any:
        if not self._woken:
            self._woken = True
            try:
                self._session = self._start()
            except Exception:
                log.debug("starting the session of a forked child failed; it records nothing", exc_info=True)
        return self._session

    def optimizer_step_started(self) -> None:
        session = self._wake()
        if session is not None:
            session.torch_scope_entered()
            session.optimizer_step_started()

    def step_boundary(self, manual: bool) -> None:
        session = self._wake()
        if session is not None:
            session.step_boundary(manual)

    def backward_done(self) -> None:
        session = self._wake()
        if session is not None:
            session.backward_done()

    def torch_work(self, training_module: Any = None) -> bool:
        return False  # stop watching module calls

    def optimizer_made(self) -> None:
        pass

    def optimizer_took_over(self, earlier_ns: int) -> None:
        pass

    def torch_scope_entered(self) -> None:
        pass

    def torch_scope_left(self) -> None:
        session = self._session
        if session is not None:
            session.torch_scope_left()
