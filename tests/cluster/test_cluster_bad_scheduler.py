"""``--scheduler`` pointed at something that is not a Dask scheduler (an HTTP server, a server that
sends a huge frame header or garbage, a closed port): one error line naming the address, exit 2,
no traceback, nothing left running. Each fake server runs in this process, in a thread, stopped
after its test whatever happens."""

from __future__ import annotations

import contextlib
import http.server
import socketserver
import struct
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterator

import pytest

from ports import free_port

REPO = Path(__file__).resolve().parents[2]
RANKS = REPO / "tests/data/traces/hta/trace_filter"
CLI_TIMEOUT_S = 120  # generous: the command gives up far sooner (see DaskExecutor's probe)
HELD_S = 150  # a fake server drops a connection its client left open this long

HUGE_HEADER = b"\xff" * 8  # a frame of 2**64 - 1 bytes announced
GARBAGE_FRAME = struct.pack("<Q", 48) + bytes(range(200, 248))  # a small frame, not Dask's
BANNER = b"SSH-2.0-OpenSSH_9.6\r\n"  # text where a frame header belongs


class _Greeter(socketserver.BaseRequestHandler):
    """Sends the server's ``greeting`` on connect, then holds the connection until the client
    closes it."""

    def handle(self) -> None:
        self.request.settimeout(HELD_S)
        try:
            self.request.sendall(self.server.greeting)
            while self.request.recv(65536):
                pass
        except OSError:
            pass


class _GreetingServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, port: int, greeting: bytes) -> None:
        self.greeting = greeting
        super().__init__(("127.0.0.1", port), _Greeter)


class _QuietHTTPServer(http.server.ThreadingHTTPServer):
    def __init__(self, port: int) -> None:
        super().__init__(("127.0.0.1", port), _QuietHandler)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def _serving(server: socketserver.BaseServer) -> Iterator[str]:
    """``server`` running in a thread while the caller uses its address; shut down and closed
    after, whatever happens."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              name="fake-scheduler", daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)
        assert not thread.is_alive()


@pytest.fixture
def http_server() -> Iterator[str]:
    with _serving(_QuietHTTPServer(free_port())) as address:
        yield address


@pytest.fixture(params=[HUGE_HEADER, GARBAGE_FRAME, BANNER], ids=["huge_header", "garbage", "banner"])
def greeting_server(request) -> Iterator[str]:
    with _serving(_GreetingServer(free_port(), request.param)) as address:
        yield address


def summary_with(address: str) -> subprocess.CompletedProcess:
    """``otel-profiler summary`` of two ranks on ``address``, in a subprocess."""
    return subprocess.run([sys.executable, "-m", "otel_profiler", "summary", str(RANKS), "--scheduler", address],
                          capture_output=True, text=True, timeout=CLI_TIMEOUT_S, cwd=REPO)


def assert_one_line(proc: subprocess.CompletedProcess, address: str, problem: str) -> None:
    """Exit 2, nothing on stdout, one stderr line naming the address and ``problem``, no traceback."""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(lines) == 1, proc.stderr
    assert f"--scheduler {address}: " in lines[0] and problem in lines[0], lines[0]
    assert proc.stdout == ""


@pytest.mark.slow  # waits out the handshake's timeout
def test_http_server_is_not_a_scheduler(http_server):
    assert_one_line(summary_with(http_server), http_server, "not a Dask scheduler")


def test_server_sending_a_huge_header_or_garbage_is_not_a_scheduler(greeting_server):
    assert_one_line(summary_with(greeting_server), greeting_server, "not a Dask scheduler")


def test_closed_port_is_one_line():
    address = f"tcp://127.0.0.1:{free_port()}"
    assert_one_line(summary_with(address), address, "connection refused")


def test_nothing_left_running_after_a_refused_scheduler():
    """In this process: the probe raises the one error and leaves no thread behind (its event
    loop and the connection are gone)."""
    pytest.importorskip("distributed")
    from otel_profiler.cluster.executor import DaskExecutor

    with _serving(_GreetingServer(free_port(), HUGE_HEADER)) as address:
        before = set(threading.enumerate())
        with pytest.raises(RuntimeError, match="not a Dask scheduler"):
            DaskExecutor(address)
        left = [t for t in threading.enumerate() if t not in before and "process_request" not in t.name]
        assert left == []
