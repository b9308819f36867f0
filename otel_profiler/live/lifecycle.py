"""Where one session stands (recording, closing, closed, failed), shared by the session's parts."""

from __future__ import annotations

from dataclasses import dataclass

from ..profiler_warnings import warn
from .steps import markers


@dataclass
class Lifecycle:
    """The session's state flags. Plain attributes, never locks: signal handlers read and set them."""

    closed: bool = False  # nothing more is recorded (stopped, failed, or not this rank's writer)
    closing: bool = False  # inside close(): a failing last flush still warns
    exiting: bool = False  # closing from atexit: the interpreter is ending
    in_signal: bool = False  # closing from the SIGTERM handler: take no lock we can avoid
    failed: bool = False

    def fail(self, exc: BaseException) -> None:
        """Turn profiling off after an internal error (one warning), also when it is the last flush
        of ``close`` that fails (the only write of a short job); silent once stopped otherwise."""
        if self.failed or (self.closed and not self.closing):
            return
        self.failed = True
        warn(f"profiling is off after an internal error ({type(exc).__name__}: {exc})")
        self.stop_quietly()

    def stop_quietly(self) -> None:
        """Record nothing more, say nothing (e.g. another process writes this rank)."""
        self.closed = True
        markers.active = False
