"""Where the map step runs: local processes (``concurrent.futures``, forked, as the loader reads a
folder of ranks today) or a Dask cluster (a ``distributed.Client`` that ``connect.connect_client``
makes), behind one ``map``.

Dask is imported only by ``DaskExecutor``, so without a scheduler nothing of it is loaded. On a
cluster, a worker lost mid-run costs nothing but time: the scheduler runs its tasks again elsewhere.
"""

from __future__ import annotations

import functools
import os
import pickle
from typing import Any, Callable, Iterator, Protocol

class Executor(Protocol):
    def map(self, fn: Callable[..., Any], items: list[Any], **kwargs: Any) -> Iterator[Any]:
        """``fn(item, **kwargs)`` for each item, results in the items' order."""

    def close(self) -> None: ...


class LocalExecutor:
    """``workers`` forked processes (1: this process)."""

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or _cores()

    def map(self, fn: Callable[..., Any], items: list[Any], **kwargs: Any) -> Iterator[Any]:
        n = min(self.workers, len(items))
        if n < 2 or not hasattr(os, "fork"):
            yield from (fn(item, **kwargs) for item in items)
            return
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        from concurrent.futures.process import BrokenProcessPool

        with ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("fork")) as pool:
            futures = [pool.submit(fn, item, **kwargs) for item in items]
            for item, f in zip(items, futures):
                try:
                    yield f.result()
                except BrokenProcessPool:
                    raise RuntimeError(f"{_named(item)}: not read: a reader process was killed (out of "
                                       "memory?); give fewer processes (-j)") from None

    def close(self) -> None:
        pass


class DaskExecutor:
    """The workers of the Dask scheduler at ``address`` (``tcp://HOST:PORT``)."""

    def __init__(self, address: str) -> None:
        from .connect import connect_client

        self.client = connect_client(address)  # RuntimeError: no scheduler there (one line)

    def map(self, fn: Callable[..., Any], items: list[Any], **kwargs: Any) -> Iterator[Any]:
        """As ``Executor.map``; ``fn`` and ``kwargs`` go with the standard pickle (``fn`` a module's
        function, as the workers import it)."""
        calls = [pickle.dumps(functools.partial(fn, item, **kwargs)) for item in items]
        futures = self.client.map(run_pickled, calls, pure=False)
        try:
            for item, f in zip(items, futures):
                try:
                    result = f.result()
                except Exception as exc:  # the cluster's failure (a rank's own is a result)
                    raise RuntimeError(f"{_named(item)}: the cluster could not read it ({type(exc).__name__}: "
                                       f"{exc})") from None
                f.release()  # the worker may drop it now
                yield result
        finally:
            self.client.cancel(futures)

    def close(self) -> None:
        self.client.close()


def run_pickled(call: bytes) -> Any:
    """Run a call that travels as bytes. The scheduler unpickles every task it is given (Dask
    since 2023.4), so a task naming ``read_run`` itself would make it import the whole reader and
    analysis (0.37 s of its CPU in one 64-rank run, before the first task starts); this module is
    all it imports."""
    return pickle.loads(call)()


def _named(item: Any) -> str:
    """An item as an error line names it: the source of an ``(index, source)`` pair, the sources
    of a run of them."""
    if isinstance(item, list):
        return ", ".join(_named(i) for i in item)
    return str(item[-1] if isinstance(item, tuple) else item)


def executor_for(scheduler: str | None, workers: int | None = None) -> Executor:
    """Dask for a ``tcp://``-style address, local processes for None, "" or ``local``."""
    if scheduler and scheduler != "local":
        return DaskExecutor(scheduler)
    return LocalExecutor(workers)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1

