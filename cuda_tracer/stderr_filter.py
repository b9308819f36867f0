"""Keep Kineto's own log lines off the job's stderr while the profiler starts or stops a window.

Kineto (inside torch) writes lines such as ``USDT:2026-01-02 10:00:00 123:123
SyncActivityProfilerHandler.cpp:52] profiler_start`` and ``ERROR:... DeviceProperties.cpp:50]
gpuGetDeviceCount failed with code 35`` straight to file descriptor 2 at every start and stop, and
``KINETO_LOG_LEVEL`` no longer silences them. ``kineto_lines_dropped()`` points descriptor 2 at a
pipe for the duration of the block only; a thread reads the pipe and writes every line that is not
in Kineto's log format back to the real stderr, at once and in order. So the job's own output
written meanwhile (by other threads) is kept, only delayed by the block's milliseconds, and nothing
of the job's is lost: the block waits for the pipe to be read out before it returns. A child
process forked meanwhile keeps the pipe as its stderr; the thread goes on forwarding for it.

Whatever fails here (no pipe, no thread at interpreter shutdown), the block runs unfiltered.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from typing import Iterator

KINETO_LINE = re.compile(rb"^(?:USDT|INFO|WARNING|ERROR|VERBOSE):\d{4}-\d\d-\d\d \d\d:\d\d:\d\d "
                         rb"\d+:\d+ [\w.]+:\d+\] ")
"""Kineto's log format: ``LEVEL:date time pid:tid File.cpp:line] message``."""

DRAIN_WAIT_S = 1.0
"""How long the block waits for the pipe to be read out (longer only if a forked child holds it)."""

_lock = threading.Lock()  # one redirection at a time (a window starts or stops in one thread)


def _forward(read_end: int, real_stderr: int) -> None:
    """Copy the pipe to the real stderr line by line, without Kineto's lines, until the pipe
    closes; then close both descriptors."""
    pending = b""
    try:
        while True:
            chunk = os.read(read_end, 65536)
            if not chunk:
                break
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            kept = b"".join(line + b"\n" for line in lines if not KINETO_LINE.match(line))
            if kept:
                _write_all(real_stderr, kept)
        if pending and not KINETO_LINE.match(pending):
            _write_all(real_stderr, pending)
    except OSError:
        pass
    finally:
        os.close(read_end)
        os.close(real_stderr)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


@contextlib.contextmanager
def kineto_lines_dropped() -> Iterator[None]:
    """Run the block with Kineto's log lines kept off descriptor 2 (see the module docstring)."""
    if not _lock.acquire(blocking=False):
        yield
        return
    try:
        restore = _redirect()
    except Exception:  # runs unfiltered
        restore = None
    try:
        yield
    finally:
        try:
            if restore is not None:
                restore()
        finally:
            _lock.release()


def _redirect():
    """Point descriptor 2 at a pipe read by a forwarding thread; return the function that
    restores descriptor 2 and waits for the thread to read the pipe out."""
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()  # what Python buffered goes out before the redirection
        except Exception:
            pass
    read_end, write_end = os.pipe()
    try:
        real_stderr = os.dup(2)
    except OSError:
        os.close(read_end)
        os.close(write_end)
        raise
    try:
        thread = threading.Thread(target=_forward, args=(read_end, real_stderr),
                                  name="otel-profiler-stderr", daemon=True)
        thread.start()
    except BaseException:
        for fd in (read_end, write_end, real_stderr):
            os.close(fd)
        raise
    try:
        os.dup2(write_end, 2)
    except OSError:
        os.close(write_end)  # the thread sees the end of the pipe and closes the rest
        raise

    def restore() -> None:
        try:
            try:
                sys.stderr.flush()
            except Exception:
                pass
            os.dup2(real_stderr, 2)
        except OSError:
            pass
        finally:
            os.close(write_end)
        thread.join(DRAIN_WAIT_S)

    return restore
