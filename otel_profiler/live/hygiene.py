"""Process hygiene of the session: SIGTERM and fork.

- ``SIGTERM``: a handler, installed only where the program has none, writes what is left and then
  dies of the signal as the program would have without the profiler;
- fork: the flush lock is taken around ``fork`` so a child never inherits it held, and SIGTERM is
  blocked across the fork (a SIGTERM that reaches a new child before it runs would otherwise hit
  the inherited Python handler and be discarded by CPython's after-fork reset of pending signals);
  a forked child (a DataLoader worker) records nothing, writes nothing and dies of SIGTERM as it
  would unprofiled.

``ProcessHygiene`` does this for one session; the process-wide hooks are in ``session`` (they know
the current session).
"""

from __future__ import annotations

import atexit
import os
import signal
import threading
from typing import Any, Callable

from .lifecycle import Lifecycle


class ProcessHygiene:
    """The SIGTERM handler and the fork handling of one session: ``close`` writes what is left."""

    def __init__(self, lifecycle: Lifecycle, lock: threading.RLock, close: Callable[[], None]) -> None:
        self.lifecycle = lifecycle
        self.lock = lock  # the session's flush lock, held around fork
        self._close = close
        self._fork_held = False
        self._fork_masked = False

    def install_sigterm(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        try:
            if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
                return  # the program handles SIGTERM itself (and usually exits through atexit)
            signal.signal(signal.SIGTERM, self.on_sigterm)
        except (ValueError, OSError):
            pass

    def uninstall_sigterm(self) -> None:
        if self.lifecycle.in_signal or threading.current_thread() is not threading.main_thread():
            return
        try:
            if signal.getsignal(signal.SIGTERM) == self.on_sigterm:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
        except (ValueError, OSError):
            pass

    def holds_sigterm(self) -> bool:
        """Our SIGTERM handler is the installed one (callable from any thread)."""
        try:
            return signal.getsignal(signal.SIGTERM) == self.on_sigterm
        except (ValueError, OSError):
            return False

    def on_sigterm(self, signum: int, frame: Any) -> None:
        """Write what is left, then die of SIGTERM as the program would have without us."""
        try:
            self.lifecycle.in_signal = True
            self._close()
        except BaseException:
            pass  # not logged: SIGTERM handler (the interrupted code may hold the logging lock)
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    def in_child(self, close_at_exit: Callable[[], None]) -> threading.RLock:
        """A forked child (e.g. a DataLoader worker) records nothing and writes nothing: closed, its
        exit hook and SIGTERM handler gone. Returns the child's own (unheld) flush lock."""
        self.lifecycle.closed = True
        self.lock = threading.RLock()
        try:
            atexit.unregister(close_at_exit)
        except Exception:
            pass  # not logged: runs right after fork in the child (its logging locks may be held)
        try:  # SIGTERM kills the child as it would without us (e.g. Pool.terminate of its workers)
            if self.holds_sigterm():
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
        except (ValueError, OSError):
            pass
        return self.lock

    def before_fork(self) -> None:
        """In the forking thread: hold the flush lock, and block SIGTERM while we hold the handler."""
        self._fork_held = self.lock.acquire(timeout=5)
        self._fork_masked = self.holds_sigterm() and block_sigterm()

    def after_fork_in_parent(self) -> None:
        if self._fork_masked:
            self._fork_masked = False
            unblock_sigterm()
        if self._fork_held:
            self._fork_held = False
            self.lock.release()

    def after_fork_in_new_child(self) -> None:
        """In the child, after ``in_child``: a SIGTERM sent since the fork (Pool.terminate) now
        kills the child."""
        if self._fork_masked:
            unblock_sigterm()


def block_sigterm() -> bool:
    """Block SIGTERM in the forking thread (the child inherits the mask). Without this, a SIGTERM
    that reaches a new child before it runs (a Pool torn down at once) hits the inherited Python
    handler and is discarded by CPython's after-fork reset of pending signals: the child never dies.
    True when this call blocked it (it was not blocked already)."""
    try:
        return signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    except (AttributeError, ValueError, OSError):
        return False


def unblock_sigterm() -> None:
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    except (AttributeError, ValueError, OSError):
        pass


_fork_hooks_installed = False


def install_fork_hooks(before: Callable[[], None], after_in_parent: Callable[[], None],
                       after_in_child: Callable[[], None]) -> None:
    """Register the process-wide fork hooks once (later calls do nothing)."""
    global _fork_hooks_installed
    if not _fork_hooks_installed and hasattr(os, "register_at_fork"):
        os.register_at_fork(before=before, after_in_parent=after_in_parent, after_in_child=after_in_child)
        _fork_hooks_installed = True
