"""On-demand capture on a running job: ``SIGUSR2`` and a UDP trigger on the loopback interface.

Both only call ``request()`` (a flag the window policy reads at the next step boundary), which is
safe from a signal handler and from another thread. The signal handler is installed only from the
main thread and only when the program has not installed its own. The UDP socket listens on
127.0.0.1 at ``port + LOCAL_RANK`` so every rank on a host has its own; any datagram triggers.
"""

from __future__ import annotations

import signal
import socket
import threading
from typing import Callable


def install_signal(request: Callable[[], None]) -> Callable[[], None] | None:
    """``SIGUSR2`` calls ``request``. Returns a function restoring the previous state, or None when
    not installed (not the main thread, no SIGUSR2, or the program handles it already)."""
    sig = getattr(signal, "SIGUSR2", None)
    if sig is None or threading.current_thread() is not threading.main_thread():
        return None
    try:
        if signal.getsignal(sig) not in (signal.SIG_DFL, None):
            return None

        def handler(signum: int, frame: object) -> None:
            request()

        signal.signal(sig, handler)
    except (ValueError, OSError):
        return None

    def restore() -> None:
        try:
            if signal.getsignal(sig) is handler and threading.current_thread() is threading.main_thread():
                signal.signal(sig, signal.SIG_DFL)
        except (ValueError, OSError):
            pass

    return restore


class UdpTrigger:
    """A daemon thread reading datagrams on 127.0.0.1:``port``; each one calls ``request``."""

    def __init__(self, port: int, request: Callable[[], None]) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind(("127.0.0.1", port))
        self._sock.settimeout(0.5)
        self.port = self._sock.getsockname()[1]
        self._request = request
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="otel-profiler-trigger", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._sock.recvfrom(512)
            except socket.timeout:
                continue
            except OSError:
                return
            self._request()

    def close(self) -> None:
        self._stop.set()
        try:
            self._sock.close()
        except OSError:
            pass


def send(port: int, host: str = "127.0.0.1") -> None:
    """Ask the job listening on ``port`` for a detailed window (what ``otel-profiler trigger`` does)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(b"capture", (host, port))
