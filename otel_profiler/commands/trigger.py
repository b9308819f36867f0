"""``otel-profiler trigger (--port P | --pid PID)``: open a detailed window in a running job.

Sends one UDP datagram to ``127.0.0.1:P`` (the job's ``OTEL_PROFILER_TRIGGER_PORT`` plus its local
rank) or ``SIGUSR2`` to process PID. The job captures its next ``OTEL_PROFILER_WINDOW_STEPS`` steps.

It says what it sent, and exits 1 without effect when nothing answers: no socket bound to the port
(``/proc/net/udp``, else an ICMP port-unreachable on a connected socket), no such process, or a
process that does not handle SIGUSR2 (it would be killed by it, so nothing is sent).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys

from ..live.triggers import send

HOST = "127.0.0.1"
_LOOPBACK = {"0100007F", "00000000", "00000000000000000000000000000000",
             "00000000000000000000000001000000", "0000000000000000FFFF00000100007F"}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("trigger", help="capture the next steps of a running job in detail",
                              description=__doc__.split("\n\n", 1)[1])
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--port", type=int,
                        help="the job's trigger port: its OTEL_PROFILER_TRIGGER_PORT (or run "
                             "--trigger-port) plus the local rank to reach")
    target.add_argument("--pid", type=int, help="send SIGUSR2 to this process (a profiled job's)")
    p.set_defaults(func=run)


def _error(text: str, code: int = 1) -> int:
    print(f"otel-profiler: error: {text}", file=sys.stderr)
    return code


def udp_bound(port: int) -> bool | None:
    """True/False when ``/proc/net/udp[6]`` tells whether a socket on this host is bound to ``port``
    on loopback or every address; None when it cannot tell (no /proc)."""
    found = None
    for table in ("/proc/net/udp", "/proc/net/udp6"):
        try:
            with open(table) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        found = bool(found)
        for line in lines:
            fields = line.split()
            if len(fields) > 1 and ":" in fields[1]:
                addr, hex_port = fields[1].rsplit(":", 1)
                if int(hex_port, 16) == port and addr.upper() in _LOOPBACK:
                    return True
    return found


def _send_connected(port: int) -> bool:
    """Send the request on a connected socket; False when the loopback answers it with ICMP
    port-unreachable (nothing listens), True otherwise."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((HOST, port))
        s.settimeout(0.3)
        try:
            s.send(b"capture")
            s.recv(1)  # the job never answers: only the error (or the timeout) comes back
        except ConnectionRefusedError:
            return False
        except OSError:  # the timeout
            return True
    return True


def _handles_sigusr2(pid: int) -> bool | None:
    """Whether process ``pid`` catches SIGUSR2 (``SigCgt`` in /proc/PID/status); None: unknown."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signal.SIGUSR2 - 1) & 1)
    except (OSError, ValueError):
        return None
    return None


def _process_name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f" ({f.read().strip()})"
    except OSError:
        return ""


def run(args: argparse.Namespace) -> int:
    if args.pid is not None:
        return _signal(args.pid)
    port = args.port
    if not 0 < port < 65536:
        return _error(f"--port {port}: not a port number (1-65535)", 2)
    nobody = (f"nothing listens on UDP {HOST}:{port}: no job whose OTEL_PROFILER_TRIGGER_PORT (or "
              "run --trigger-port) plus local rank is this port runs on this host")
    bound = udp_bound(port)
    if bound is False:
        return _error(nobody + "; nothing was sent")
    try:
        if bound:
            send(port, HOST)
        elif not _send_connected(port):
            return _error(nobody)
    except OSError as exc:
        return _error(f"cannot send to UDP {HOST}:{port}: {exc.strerror or exc}")
    print(f"otel-profiler: sent a capture request (one UDP datagram) to {HOST}:{port}; the job "
          "captures its next OTEL_PROFILER_WINDOW_STEPS steps (5 by default)", file=sys.stderr)
    return 0


def _signal(pid: int) -> int:
    if pid <= 0:
        return _error(f"--pid {pid}: not a process id", 2)
    if not os.path.exists(f"/proc/{pid}") and os.path.isdir("/proc"):
        return _error(f"no process {pid}; nothing was sent")
    if _handles_sigusr2(pid) is False:
        return _error(f"process {pid}{_process_name(pid)} does not handle SIGUSR2, so it is not a "
                      "job profiled by otel-profiler (SIGUSR2 would end it); nothing was sent")
    try:
        os.kill(pid, signal.SIGUSR2)
    except ProcessLookupError:
        return _error(f"no process {pid}; nothing was sent")
    except (PermissionError, OverflowError) as exc:
        return _error(f"cannot signal process {pid}: {getattr(exc, 'strerror', None) or exc}")
    print(f"otel-profiler: sent SIGUSR2 to process {pid}{_process_name(pid)}; it captures its next "
          "OTEL_PROFILER_WINDOW_STEPS steps (5 by default)", file=sys.stderr)
    return 0
