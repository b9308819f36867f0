"""Keep Kineto's own log lines (and torch's warning about its window's event tree) off the job's
stderr while the profiler starts or stops a window.

Kineto (inside torch) writes lines such as ``USDT:2026-01-02 10:00:00 123:123
SyncActivityProfilerHandler.cpp:52] profiler_start`` and ``ERROR:... DeviceProperties.cpp:50]
gpuGetDeviceCount failed with code 35`` straight to file descriptor 2 at every start and stop, and
``KINETO_LOG_LEVEL`` no longer silences them. ``kineto_lines_dropped()`` points descriptor 2 at a
pipe for the duration of the block only; a thread reads the pipe and writes every line that is not
in Kineto's log format back to the real stderr, at once and in order. So the job's own output
written meanwhile (by other threads) is kept, only delayed by the block's milliseconds, and nothing
of the job's is lost or reordered: descriptor 2 is given back only at a moment when everything
written to the pipe has been forwarded (checked and switched under the thread's lock), so a line
written afterwards cannot overtake one written before. A child process forked meanwhile keeps the
pipe as its stderr; the thread goes on forwarding for it.

Whatever fails here (no pipe, no thread at interpreter shutdown), the block runs unfiltered.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import logging
import os
import re
import select
import sys
import termios
import threading
import time
from typing import Callable, Iterator

log = logging.getLogger("otel_profiler." + __name__)

KINETO_MESSAGE = re.compile(rb"(?:USDT|INFO|WARNING|ERROR|VERBOSE):\d{4}-\d\d-\d\d \d\d:\d\d:\d\d "
                            rb"\d+:\d+ [\w.]+:\d+\] (?:profiler_start|profiler_stop|"
                            rb"gpuGetDeviceCount failed with code \d+)")
"""Kineto's chatter, in its log format ``LEVEL:date time pid:tid File.cpp:line] message``: the
messages it writes at every start and stop. Kineto writes the message, then its newline in a
second write, so another thread's line can land between the two: the message is cut out of the
stream exactly (never the line it ran into), and its newline is dropped where it comes. Other
Kineto lines are kept: their end cannot be told from the text of a line that ran into them."""

TORCH_TREE_WARNING = re.compile(rb"\[W\d{4} \d\d:\d\d:\d\d\.\d+ collection\.cpp:\d+\] Warning: "
                                rb"[^\n]*? \(function operator\(\)\)")
"""The warning torch (2.15 on) prints while it builds a stopped window's event tree when a Python
call of another thread ended before it began by its clock (``[W1205 00:39:58.600899872
collection.cpp:671] Warning: threading.py(611): wait (function operator())``; torch 2.13 raised
instead, see ``PythonTracerFailed``): torch's own bookkeeping of the profiler's window, printed
at random in jobs with busy threads. Cut out like Kineto's messages."""

DROPPED = re.compile(KINETO_MESSAGE.pattern + rb"|" + TORCH_TREE_WARNING.pattern)

DRAIN_WAIT_S = 1.0
"""How long the block waits for the pipe to be read out (longer only if a forked child holds it)."""

_lock = threading.Lock()  # one redirection at a time (a window starts or stops in one thread)


class _Forwarder:
    """Reads the pipe and writes what is not Kineto's to the real stderr; every read and its
    forwarding happen under ``lock``, so holding it with the pipe empty means all is forwarded."""

    def __init__(self, read_end: int, real_stderr: int) -> None:
        self.read_end, self.real_stderr = read_end, real_stderr
        self.lock = threading.Lock()
        self.partial = b""  # the start of a line whose end has not come yet
        self.newlines_owed = 0  # Kineto's newlines still to come after messages cut out
        os.set_blocking(read_end, False)

    def run(self) -> None:
        """Forward until every writer closed the pipe; then close both descriptors."""
        poller = select.poll()
        poller.register(self.read_end, select.POLLIN | select.POLLHUP)
        try:
            while True:
                poller.poll()
                with self.lock:
                    try:
                        chunk = os.read(self.read_end, 65536)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        self.flush_partial()
                        break
                    self.forward(chunk)
        except OSError:
            pass
        finally:
            os.close(self.read_end)
            os.close(self.real_stderr)

    def forward(self, chunk: bytes) -> None:
        text = self.partial + chunk
        end = text.rfind(b"\n") + 1
        self.partial = text[end:]
        self._write(text[:end])

    def flush_partial(self) -> None:
        partial, self.partial = self.partial, b""
        self._write(partial)

    def _write(self, text: bytes) -> None:
        """``text`` without Kineto's messages and their newlines (an empty line where a message
        was cut out: its newline, which may come later than the message)."""
        if not text:
            return
        pieces = DROPPED.split(text)
        self.newlines_owed += len(pieces) - 1
        out = []
        for piece in pieces:
            while self.newlines_owed and piece.startswith(b"\n"):
                piece = piece[1:]
                self.newlines_owed -= 1
            out.append(piece)
        kept = b"".join(out)
        while self.newlines_owed and b"\n\n" in kept:  # the newline came after another line
            kept = kept.replace(b"\n\n", b"\n", 1)
            self.newlines_owed -= 1
        if kept:
            _write_all(self.real_stderr, kept)

    def unread(self) -> int:
        """Bytes in the pipe not read yet."""
        count = array.array("i", [0])
        fcntl.ioctl(self.read_end, termios.FIONREAD, count)
        return count[0]

    def give_back(self, saved: int) -> None:
        """Point descriptor 2 at ``saved`` (the real stderr) at a moment when the pipe is read out
        and nothing is being forwarded (waiting at most ``DRAIN_WAIT_S``), so no line written later
        can overtake one in the pipe."""
        deadline = time.monotonic() + DRAIN_WAIT_S
        while True:
            with self.lock:
                try:
                    empty = self.unread() == 0
                except OSError:  # the thread stopped on an error: nothing more will be read
                    empty = True
                if empty or time.monotonic() > deadline:
                    try:
                        self.flush_partial()
                    except OSError:
                        pass
                    os.dup2(saved, 2)
                    return
            time.sleep(0.0002)


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
        log.debug("redirecting stderr for the filter failed; it runs unfiltered", exc_info=True)
        restore = None
    try:
        yield
    finally:
        try:
            if restore is not None:
                restore()
        finally:
            _lock.release()


def _redirect() -> Callable[[], None]:
    """Point descriptor 2 at a pipe read by a forwarding thread; return the function that
    gives descriptor 2 back once the pipe is read out."""
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()  # what Python buffered goes out before the redirection
        except Exception:
            log.debug("flushing a stream before redirecting stderr failed", exc_info=True)
    read_end, write_end = os.pipe()
    try:
        real_stderr = os.dup(2)  # the forwarder's (it closes it)
        try:
            saved = os.dup(2)  # the one descriptor 2 is given back from
        except OSError:
            os.close(real_stderr)
            raise
    except OSError:
        os.close(read_end)
        os.close(write_end)
        raise
    try:
        forwarder = _Forwarder(read_end, real_stderr)
        thread = threading.Thread(target=forwarder.run, name="otel-profiler-stderr", daemon=True)
        thread.start()
    except BaseException:
        for fd in (read_end, write_end, real_stderr, saved):
            os.close(fd)
        raise
    try:
        os.dup2(write_end, 2)
    except OSError:
        os.close(write_end)  # the thread sees the end of the pipe and closes the rest
        os.close(saved)
        raise

    def restore() -> None:
        try:
            try:
                sys.stderr.flush()
            except Exception:
                log.debug("flushing stderr before restoring it failed", exc_info=True)
            forwarder.give_back(saved)
        finally:
            os.close(saved)
            os.close(write_end)
        thread.join(DRAIN_WAIT_S)

    return restore
