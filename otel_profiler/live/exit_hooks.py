"""The session's close at the end of the process, however the job ends it.

A normal exit, ``sys.exit`` and ``KeyboardInterrupt`` run ``atexit``. ``os._exit`` (a job that
skips its cleanup, a worker pool's end) runs nothing, so what was recorded since the last flush
would be lost without a word: ``os._exit`` is wrapped once, and in the process that registered a
close, that close runs first, in a thread of its own and for at most ``HARD_EXIT_CLOSE_S`` (a lock
held by a thread the exit cut short must not keep the job from ending); then the job exits with
its own status. When the close does not finish in time, one line says what was lost. Other
processes (forked children that did not start a session of their own) go straight through.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
from typing import Callable

log = logging.getLogger(__name__)

HARD_EXIT_CLOSE_S = 10.0
"""The most ``os._exit`` waits for the session's close (its network part is bounded more tightly)."""

_closes: dict[int, Callable[[], None]] = {}  # pid -> the close of that process's session
_real_exit: Callable[[int], None] | None = None
_lock = threading.Lock()


def close_at_exit(close: Callable[[], None]) -> None:
    """Run ``close`` when this process ends: through ``atexit``, and before an ``os._exit``."""
    atexit.register(close)
    with _lock:
        _closes[os.getpid()] = close
        _wrap_hard_exit()


def forget_at_exit(close: Callable[[], None]) -> None:
    """``close`` has run (or this process's session is gone): nothing more at the end."""
    try:
        atexit.unregister(close)
    except Exception:
        log.debug("unregistering the exit hook failed", exc_info=True)
    with _lock:
        if _closes.get(os.getpid()) is close:
            del _closes[os.getpid()]


def _wrap_hard_exit() -> None:
    global _real_exit
    if _real_exit is None:
        _real_exit = os._exit
        os._exit = _exit  # type: ignore[assignment]


def _exit(status: int) -> None:
    """``os._exit`` that closes this process's session first (see the module docstring)."""
    close = _closes.pop(os.getpid(), None)
    if close is not None:
        _close_in_time(close)
    assert _real_exit is not None
    _real_exit(status)


def _close_in_time(close: Callable[[], None]) -> None:
    try:
        worker = threading.Thread(target=close, name="otel-profiler-exit", daemon=True)
        worker.start()
        worker.join(HARD_EXIT_CLOSE_S)
        if worker.is_alive():
            print(f"otel-profiler: warning: the job ended with os._exit and the profile could not be "
                  f"finished within {HARD_EXIT_CLOSE_S:.0f} s; what was recorded since the last write "
                  "is lost", file=sys.stderr, flush=True)
    except Exception:  # at exit, whatever fails: the job's exit goes on
        log.debug("closing the session before os._exit failed", exc_info=True)
