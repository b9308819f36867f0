"""The command's signals, for ``otel-profiler run``: the command is asked to end when ``run`` dies
(Linux's parent-death signal), signals sent to ``run`` are passed on to it, and ``run`` ends by the
signal the command died of."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from typing import Callable

log = logging.getLogger(__name__)


PR_SET_PDEATHSIG = 1


def parent_death_signal() -> Callable[[], None] | None:
    """What the child runs before COMMAND starts (Linux): SIGTERM to it when ``run`` dies, however.
    Everything is looked up here, in the parent: the child only makes the call."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except Exception:
        log.debug("libc's prctl could not be found; no parent-death signal", exc_info=True)
        return None
    parent, term = os.getpid(), int(signal.SIGTERM)

    def in_child() -> None:
        try:
            prctl(PR_SET_PDEATHSIG, term, 0, 0, 0)
            if os.getppid() != parent:  # run died before the call: act as the signal would
                os.kill(os.getpid(), term)
        except Exception:
            pass  # not logged: runs in the child between fork and exec (its logging locks may be held)

    return in_child


FORWARDED = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGUSR2)
SI_KERNEL = 0x80
"""``si_code`` of a signal the kernel sent (a key typed at the terminal), not a process (``kill``)."""


def wait_forwarding_signals(child: subprocess.Popen) -> int:
    """Wait for ``child``; SIGTERM, SIGHUP, SIGUSR2 and a SIGINT sent by a process go to it. A
    Ctrl-C typed at the terminal reached it already (it is in our process group): not sent again."""
    if not hasattr(signal, "sigtimedwait"):
        return _wait_with_handlers(child)
    waited = set(FORWARDED) | {signal.SIGCHLD}  # SIGCHLD: the job's end is seen at once, not at the next poll
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, waited)
    try:
        while True:
            info = signal.sigtimedwait(waited, 0.1)
            if info is not None and info.si_signo != signal.SIGCHLD and \
                    not (info.si_signo == signal.SIGINT and info.si_code == SI_KERNEL):
                _send(child, info.si_signo)
            code = child.poll()
            if code is not None:
                return code
    finally:
        while signal.sigtimedwait(waited, 0) is not None:  # nothing pending left to act later
            pass
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


TERMINATING = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE, signal.SIGALRM, signal.SIGUSR1,
               signal.SIGUSR2, signal.SIGKILL}
"""Signals whose default action ends a process without a core dump: ``run`` ends by the same one."""


def end_as_the_job_did(signum: int) -> int:
    """The command died of ``signum``: ``run`` dies of it too (after its summary), so whoever waits
    for ``run`` (a shell, a scheduler, ``subprocess``) sees what it would see of the command alone.
    A signal that would dump core is not raised again: 128 + its number, as a shell reports it."""
    if signum in TERMINATING:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
            if signum != signal.SIGKILL:
                signal.signal(signum, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
            os.kill(os.getpid(), signum)
        except (OSError, ValueError):  # not raised: the exit status says it
            log.debug("ending by the command's signal failed", exc_info=True)
    return 128 + signum


def _wait_with_handlers(child: subprocess.Popen) -> int:
    """Where signals cannot be waited for: handlers forward them all (SIGINT too)."""
    previous = {}
    for sig in FORWARDED:
        try:
            previous[sig] = signal.signal(sig, lambda signum, frame: _send(child, signum))
        except (ValueError, OSError):
            pass
    try:
        return child.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _send(child: subprocess.Popen, signum: int) -> None:
    try:
        child.send_signal(signum)
    except OSError:
        pass
