"""On-demand capture on a running job: ``SIGUSR2`` and a trigger socket only its user can reach.

Both only call ``request()`` (a flag the window policy reads at the next step boundary), which is
safe from a signal handler and from another thread. The signal handler is installed only from the
main thread and only when the program has not installed its own.

The trigger socket is a Unix datagram socket ``trigger-<port>`` (``port`` = the trigger port plus
``LOCAL_RANK``, so every rank on a host has its own) in the folder ``otel-profiler-<uid>`` of the
temporary directory, which must be the user's own with mode 0700: other users cannot send to it.
Each datagram carries its sender's credentials (``SO_PASSCRED``): one from another user is dropped
after comparing a number. Of the rest, one request per ``MIN_INTERVAL_S`` is taken; the others are
dropped without work. The socket is closed in forked children and removed when the trigger closes.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import struct
import tempfile
import threading
import time
from typing import Callable

from cuda_tracer.private_files import check_private_dir, make_private_dir

from ...metrics.sockets import close_in_forked_children

MIN_INTERVAL_S = 5.0
"""At most one request is taken per this many seconds; datagrams in between are dropped."""

_CREDENTIALS = struct.Struct("iII")  # struct ucred: pid, uid, gid


def _ended(signum: int, frame: object) -> None:
    """SIGUSR2's handler once the session that took it has ended: a late request is dropped."""


def install_signal(request: Callable[[], None]) -> Callable[[], None] | None:
    """``SIGUSR2`` calls ``request``. Returns a function to call when the session ends, or None
    when not installed (not the main thread, no SIGUSR2, or the program handles it already).

    When the session ends SIGUSR2 is dropped rather than given back its default action: a capture
    request arriving while the job exits must not kill it. At exit it is ignored (Python gives its
    handlers back their default action as the interpreter finalizes); a session stopped earlier
    leaves a handler that drops it, so programs the job starts later get the default action."""
    sig = getattr(signal, "SIGUSR2", None)
    if sig is None or threading.current_thread() is not threading.main_thread():
        return None
    try:
        current = signal.getsignal(sig)
        if current not in (signal.SIG_DFL, None, _ended):  # else: the program's own
            return None

        def handler(signum: int, frame: object) -> None:
            request()

        signal.signal(sig, handler)
    except (ValueError, OSError):
        return None

    def restore(at_exit: bool = False) -> None:
        try:
            if signal.getsignal(sig) is handler and threading.current_thread() is threading.main_thread():
                signal.signal(sig, signal.SIG_IGN if at_exit else _ended)
        except (ValueError, OSError):
            pass

    return restore


def trigger_folder() -> str:
    """The user's folder of trigger sockets: ``otel-profiler-<uid>`` in the temporary directory."""
    return os.path.join(tempfile.gettempdir(), f"otel-profiler-{os.geteuid()}")


def socket_name(port: int) -> str:
    return f"trigger-{port}"


def private_folder(path: str) -> str:
    """``path``, made when missing; OSError naming it unless it is a folder of this user that no
    other user may write (``private_files``). Its mode is then made 0700: no one else may reach a
    socket in it."""
    make_private_dir(path)
    if os.stat(path).st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def is_private_folder(path: str) -> bool:
    """Whether ``path`` is a folder of this user with mode 0700."""
    try:
        check_private_dir(path)
        return not os.stat(path).st_mode & 0o077
    except OSError:
        return False


class TriggerSocket:
    """A daemon thread reading the trigger socket of ``port``; each accepted datagram calls
    ``request``. Raises OSError when the socket cannot be made (port out of range, folder not the
    user's own, another process of the user on the same port). Counts what it received:
    ``accepted``, ``foreign`` (another user's) and ``limited`` (within ``MIN_INTERVAL_S``)."""

    def __init__(self, port: int, request: Callable[[], None]) -> None:
        if not 0 < port < 65536:
            raise OSError(errno.EINVAL, f"trigger port {port} is not a port number (1-65535)")
        if not (hasattr(socket, "AF_UNIX") and hasattr(os, "geteuid")):
            raise OSError(errno.EAFNOSUPPORT, "the trigger socket needs a Unix system")
        self.port = port
        self.path = os.path.join(private_folder(trigger_folder()), socket_name(port))
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            _bind(self._sock, self.path)
            self._inode = os.stat(self.path).st_ino
            if hasattr(socket, "SO_PASSCRED"):
                self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            self._sock.settimeout(0.5)
        except BaseException:
            self._sock.close()
            raise
        close_in_forked_children(self._sock)
        self._pid = os.getpid()
        self.accepted = self.foreign = self.limited = 0
        self._request = request
        self._next = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="otel-profiler-trigger", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        space = socket.CMSG_SPACE(_CREDENTIALS.size)
        while not self._stop.is_set():
            try:
                _, ancillary, _, _ = self._sock.recvmsg(64, space)
            except socket.timeout:
                continue
            except OSError:
                return
            if not _same_user(ancillary):
                self.foreign += 1
                continue
            now = time.monotonic()
            if now < self._next:
                self.limited += 1
                continue
            self._next = now + MIN_INTERVAL_S
            self.accepted += 1
            self._request()

    def close(self) -> None:
        """Stop reading and remove the socket (only this process's own, never a successor's)."""
        self._stop.set()
        try:
            self._sock.close()
        except OSError:
            pass
        if os.getpid() != self._pid:
            return
        try:
            if os.stat(self.path).st_ino == self._inode:
                os.unlink(self.path)
        except OSError:
            pass


UdpTrigger = TriggerSocket  # its name when it was a UDP socket, which the session still imports


def _same_user(ancillary: list) -> bool:
    """Whether the datagram's credentials (set by the kernel) name this process's user; True where
    the system gives none (no ``SO_PASSCRED``: the folder's mode is the check)."""
    if not hasattr(socket, "SCM_CREDENTIALS"):
        return True
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS and len(data) >= _CREDENTIALS.size:
            return _CREDENTIALS.unpack_from(data)[1] == os.geteuid()
    return False


def _bind(sock: socket.socket, path: str) -> None:
    """Bind ``sock`` to ``path``, replacing a socket file no process listens on any more (left by
    a job that was killed)."""
    try:
        sock.bind(path)
        return
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE or _listening(path):
            raise
    os.unlink(path)
    sock.bind(path)


def _listening(path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            return False
        except OSError:
            return True
    return True


def send(path: str) -> None:
    """Ask the job whose trigger socket is ``path`` for a detailed window (what ``otel-profiler
    trigger --port`` does). Raises OSError: ConnectionRefusedError when no process reads it."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.settimeout(5.0)  # a full queue: the job is not reading, so the request would be dropped
        s.connect(path)
        s.send(b"capture")
