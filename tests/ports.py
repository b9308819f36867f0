"""Ports of 127.0.0.1 for the tests' servers.

A port picked now is often bound later: Jaeger's ports go into a Collector's config before Jaeger
starts, and a server restarted after a crash binds its old ports again. A port the kernel hands out
for ``bind(0)`` is one of its ephemeral ports, the same range every outgoing connection on the
machine takes its local port from, so on a busy machine another connection can take it in between
("address already in use"). ``free_port`` picks from below that range instead, where only an
explicit bind can take a port, never one this process handed out before.
"""

from __future__ import annotations

import random
import socket

LOWEST = 10000
_picker = random.Random()  # seeded from the system, whatever the tests do to ``random``
_given: set[int] = set()


def _ephemeral_start() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port of 127.0.0.1 nothing listens on now, outside the ephemeral range where there is room."""
    start = _ephemeral_start()
    if start - LOWEST >= 2000:
        for _ in range(200):
            port = _picker.randrange(LOWEST, start)
            if port not in _given and _bindable(port):
                _given.add(port)
                return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
