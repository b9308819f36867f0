"""Listening sockets that another local user cannot turn against the job.

- :class:`BoundedThreads`: a ``socketserver`` mixin serving at most ``max_connections`` connections
  at once, each on its own thread and ended ``deadline_s`` after it was accepted, whatever it sends
  (a client dripping one byte a second included); a connection past the limit is closed as soon as
  it is accepted, before a byte is read and without a thread. So a flood of connections holds a
  bounded number of file descriptors and threads, before any authentication.
- :func:`close_in_forked_children`: a socket of this process is closed in every child it forks
  (DataLoader workers, ``multiprocessing`` pools), which then holds no listening socket of the job.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import weakref
from typing import Any

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 16
"""Connections served at once (a scrape takes milliseconds; Prometheus holds one at a time)."""

REQUEST_DEADLINE_S = 5.0
"""A connection is ended this long after it was accepted, whether or not it is still sending."""


# ------------------------------------------------------------------------ forked children
_inherited: "weakref.WeakSet[socket.socket]" = weakref.WeakSet()
_hook_installed = False


def close_in_forked_children(sock: socket.socket) -> None:
    """Close ``sock`` in any child forked from now on; the parent keeps it. A closed or collected
    socket is left alone."""
    global _hook_installed
    if not _hook_installed and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_close_inherited)
        _hook_installed = True
    _inherited.add(sock)


def _close_inherited() -> None:
    """In the new child: give each socket's descriptor back at once (``detach``, then close: no
    TLS close notification, no wait for buffered readers; the parent's connection is untouched)."""
    for sock in list(_inherited):
        try:
            fd = sock.detach()
            if fd >= 0:
                os.close(fd)
        except Exception:
            pass  # not logged: runs right after fork in the child (its logging locks may be held)
    _inherited.clear()


# ------------------------------------------------------------------------ deadlines
class _Deadlines:
    """One thread ending every connection past its deadline: ``shutdown`` makes the handler's read
    or write fail at once, then the handler closes the connection. A connection is forgotten under
    the same lock before it is closed, so a descriptor number reused since is never touched."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: dict[socket.socket, float] = {}
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="otel-profiler-prometheus-deadlines",
                                        daemon=True)
        self._thread.start()

    def add(self, conn: socket.socket, seconds: float) -> None:
        with self._cond:
            self._due[conn] = time.monotonic() + seconds
            self._cond.notify()

    def remove(self, conn: socket.socket) -> None:
        with self._cond:
            self._due.pop(conn, None)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()

    def _run(self) -> None:
        with self._cond:
            while not self._stopped:
                now = time.monotonic()
                for conn, due in list(self._due.items()):
                    if due <= now:
                        del self._due[conn]
                        try:  # on the descriptor itself: a TLS socket's state is its thread's
                            socket.socket.shutdown(conn, socket.SHUT_RDWR)
                        except OSError:
                            pass
                nearest = min(self._due.values(), default=None)
                self._cond.wait(None if nearest is None else max(nearest - now, 0.01))


# ------------------------------------------------------------------------ the server mixin
class BoundedThreads:
    """Put before ``socketserver.ThreadingMixIn`` in a server's bases. ``refused`` counts the
    connections closed because ``max_connections`` were being served."""

    max_connections = MAX_CONNECTIONS
    deadline_s = REQUEST_DEADLINE_S

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.refused = 0
        self._slots = threading.BoundedSemaphore(self.max_connections)
        self._deadlines = _Deadlines()
        try:
            super().__init__(*args, **kwargs)
        except BaseException:
            self._deadlines.stop()
            raise

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.refused += 1
            self.shutdown_request(request)  # type: ignore[attr-defined]
            return
        self._deadlines.add(request, self.deadline_s)
        close_in_forked_children(request)
        try:
            threading.Thread(target=self._serve, args=(request, client_address),
                             name="otel-profiler-prometheus-request", daemon=True).start()
        except Exception:  # no thread to be had: this connection is not served
            log.debug("no thread for a metrics request; the connection is not served", exc_info=True)
            self._done(request)

    def _serve(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)  # type: ignore[attr-defined]
        except Exception:
            log.debug("a metrics request failed", exc_info=True)
            self.handle_error(request, client_address)  # type: ignore[attr-defined]
        finally:
            self._done(request)

    def _done(self, request: Any) -> None:
        self._deadlines.remove(request)
        self.shutdown_request(request)  # type: ignore[attr-defined]
        self._slots.release()

    def server_close(self) -> None:
        self._deadlines.stop()
        super().server_close()  # type: ignore[misc]
