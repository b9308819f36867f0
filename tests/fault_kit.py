"""Shared parts of the fault-injection tests and ``benchmarks/delivery.py``.

- :func:`job_env` / :func:`run_job`: ``tests/fault_job.py`` profiled zero-code in a subprocess, bounded
  by a timeout.
- :class:`FaultyReceiver`: a real OTLP receiver (gRPC and HTTP on 127.0.0.1) whose health follows a
  mode: ``ok``, ``errors`` (HTTP 503 / gRPC UNAVAILABLE on every request: retryable), ``fail500``
  (HTTP 500 / gRPC INTERNAL on every request: not retryable, kept for replay), ``flap`` (every
  second request refused, so delivery depends on retries), ``slow`` (``delay_s`` per request).
- :class:`SilentPort`: a port that accepts TCP connections and never answers (a hung collector).
- :func:`busy_cores`: a fixture running one busy-loop process per core for the test's duration (shared
  out among parallel workers), so the tests that use it pass on a machine with no idle core.
- :func:`descendants` / :func:`wait_gone`: the processes a job started, and a poll until they end.
- :func:`span_ids` / :func:`expected_span_ids`: the ``(trace id, span id)`` pairs received, spooled
  or produced by ``otel-profiler export`` (the span model) for a profile folder, to count spans end
  to end.
"""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from otel_profiler.bootstrap import SITE_DIR

from conftest import CORES_PER_WORKER

REPO = Path(__file__).resolve().parent.parent
JOB = str(REPO / "tests" / "fault_job.py")
RUN_ID = "fault-run"
MODES = ("ok", "errors", "fail500", "flap", "slow")
GONE_DEADLINE_S = 120  # polls give a busy machine this long before a test fails


def job_env(folder: Path, **extra: str) -> dict[str, str]:
    """Environment of a zero-code profiled job writing ``folder`` (fixed run id, short flushes)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PYTHONPATH"))}
    env.update(OTEL_PROFILER_ENABLED="true", PYTHONPATH=f"{SITE_DIR}{os.pathsep}{REPO}",
               OTEL_PROFILER_PROFILE_DIR=str(folder), OTEL_PROFILER_RUN_ID=RUN_ID,
               OTEL_PROFILER_SIGNAL="false", OTEL_PROFILER_SUMMARY_AT_EXIT="false",
               OTEL_PROFILER_FLUSH_INTERVAL_S="0.5", OTEL_METRICS_EXPORTER="none",
               OTEL_TRACES_EXPORTER="none", OTEL_LOGS_EXPORTER="none")
    env.update(extra)
    return env


def otlp_env(endpoint: str, protocol: str, spool: Path, **extra: str) -> dict[str, str]:
    """OTLP export settings: the endpoint and the spool folder, every other setting its default
    (30 s of retries, 10 s per request): the delivery contract must hold as users run it."""
    return {"OTEL_TRACES_EXPORTER": "otlp",  # job_env turns the standard exporters off
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
            "OTEL_PROFILER_SPOOL_DIR": str(spool), **extra}


def run_job(args: list[str], env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    """Run the job in its own process group; on timeout the whole group (pool workers, the
    exporter) is killed, so a hung job leaves nothing behind, then ``TimeoutExpired`` is raised."""
    return run_jobs([(args, env)], timeout)[0]


def run_jobs(jobs: list[tuple[list[str], dict[str, str]]], timeout: float = 600) -> list[subprocess.CompletedProcess]:
    """Run the jobs side by side, each as ``run_job`` runs one (its own process group, killed whole on
    timeout): independent jobs that mostly wait take the time of the longest, not of them all."""
    procs = [subprocess.Popen([sys.executable, JOB, *args], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True) for args, env in jobs]
    deadline = time.monotonic() + timeout
    done = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
            done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    finally:
        for proc in procs[len(done):]:  # a job timed out: it and the ones not yet waited for
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:  # it had ended
                pass
            proc.communicate()
    return done


# ----------------------------------------------------------------------------- the receiver
class _Server(ThreadingHTTPServer):
    """Stops at once even while a slow request still sleeps in its handler thread."""

    daemon_threads = True
    block_on_close = False

    def handle_error(self, request, client_address) -> None:  # quiet: faults are the point
        pass


class HttpEndpoint:
    """A local HTTP server on a free port of 127.0.0.1, serving ``handler`` from a thread."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = _Server(("127.0.0.1", 0), handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class FaultyReceiver:
    """gRPC and HTTP OTLP receivers on free 127.0.0.1 ports whose health follows ``mode``."""

    def __init__(self, mode: str = "ok", delay_s: float = 2.0) -> None:
        assert mode in MODES, mode
        self.mode, self.delay_s = mode, delay_s
        self._taken: list = []  # requests as received: messages (gRPC) or bytes (HTTP), parsed lazily
        self.refused = 0
        self._calls = 0
        self._lock = threading.Lock()

    @property
    def requests(self) -> list[ExportTraceServiceRequest]:
        with self._lock:
            taken = list(self._taken)
        return [ExportTraceServiceRequest.FromString(r) if isinstance(r, bytes) else r for r in taken]

    def accept(self, request) -> bool:
        """Take one request (True) or refuse it as the mode says (False). Nothing is parsed here,
        so a benchmark's receiver costs little CPU beside the job it measures."""
        with self._lock:
            self._calls += 1
            if self.mode in ("errors", "fail500") or (self.mode == "flap" and self._calls % 2):
                self.refused += 1
                return False
        if self.mode == "slow":
            time.sleep(self.delay_s)
        with self._lock:
            self._taken.append(request)
        return True

    def start(self) -> "FaultyReceiver":
        receiver = self

        class Servicer(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request, context):  # noqa: N802 (the proto's name)
                if not receiver.accept(request):
                    context.abort(grpc.StatusCode.INTERNAL if receiver.mode == "fail500"
                                  else grpc.StatusCode.UNAVAILABLE, "injected fault")
                return ExportTraceServiceResponse()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                ok = receiver.accept(body)
                reply = ExportTraceServiceResponse().SerializeToString() if ok else b"injected fault"
                try:
                    self.send_response(200 if ok else 500 if receiver.mode == "fail500" else 503)
                    self.send_header("Content-Length", str(len(reply)))
                    self.end_headers()
                    self.wfile.write(reply)
                except OSError:  # the client gave up waiting (slow mode): nothing to answer
                    pass

            def log_message(self, *args):
                pass

        self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=4),
                                 options=[("grpc.max_receive_message_length", 64 << 20)])
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Servicer(), self._grpc)
        self.grpc_port = self._grpc.add_insecure_port("127.0.0.1:0")
        self._grpc.start()
        self._http = _Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._http.serve_forever, daemon=True).start()
        return self

    def endpoint(self, protocol: str) -> str:
        port = self.grpc_port if protocol == "grpc" else self._http.server_address[1]
        return f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        self._grpc.stop(0)
        self._http.shutdown()
        self._http.server_close()

    def __enter__(self) -> "FaultyReceiver":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class SilentPort:
    """127.0.0.1 port whose connections are accepted and then left unanswered (nothing is read)."""

    def __init__(self) -> None:
        import socket

        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self._held: list = []
        self._stop = False
        self.port = self._sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self._held.append(conn)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        import socket

        self._stop = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept(), so the port is free
        except OSError:
            pass
        self._sock.close()
        for conn in self._held:
            conn.close()

    def __enter__(self) -> "SilentPort":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ----------------------------------------------------------------------------- a busy machine
@pytest.fixture
def busy_cores():
    """One busy-loop process per core while the test runs (its own processes, ended by pid). Parallel
    workers share them out: each runs its share, so that the machine holds one per core in all."""
    n = CORES_PER_WORKER
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield n
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(timeout=60)


def descendants(pid: int) -> list:
    """Every process under ``pid`` (psutil.Process objects), now."""
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def wait_gone(procs: list, deadline_s: float = GONE_DEADLINE_S) -> list:
    """Poll until every process in ``procs`` has ended (a zombie counts as ended); returns the
    ones still running at the deadline."""
    import psutil

    def running(p) -> bool:
        try:
            return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    end = time.monotonic() + deadline_s
    left = [p for p in procs if running(p)]
    while left and time.monotonic() < end:
        time.sleep(0.2)
        left = [p for p in left if running(p)]
    return left


# ----------------------------------------------------------------------------- counting spans
def step_span_ids(requests) -> set[tuple[bytes, bytes]]:
    """The ``(trace id, span id)`` of every step span (``train.step``) in some requests."""
    return {(s.trace_id, s.span_id) for r in requests for rs in r.resource_spans
            for ss in rs.scope_spans for s in ss.spans if s.name == "train.step"}


def span_ids(requests) -> list[tuple[bytes, bytes]]:
    """Every ``(trace id, span id)`` of some ``ExportTraceServiceRequest`` messages."""
    return [(s.trace_id, s.span_id) for r in requests for rs in r.resource_spans
            for ss in rs.scope_spans for s in ss.spans]


def pb_requests(path: Path):
    """The requests of a spool folder or a ``.pb`` file."""
    from otel_profiler.export.sinks.files import read_requests, spool_files

    for file in spool_files(str(path)) if path.exists() else []:
        for raw in read_requests(file):
            yield ExportTraceServiceRequest.FromString(raw)


def expected_span_ids(folder: Path, out: Path) -> list[tuple[bytes, bytes]]:
    """The span ids of :func:`expected_requests`."""
    return span_ids(expected_requests(folder, out))


def expected_requests(folder: Path, out: Path) -> list:
    """What the span model makes of a profile folder (``otel-profiler export --output``, run here
    with the job's run id and no other OTEL_ variable)."""
    from otel_profiler.cli import main

    saved = {k: v for k, v in os.environ.items() if k.startswith("OTEL_")}
    try:
        for k in saved:
            del os.environ[k]
        os.environ["OTEL_PROFILER_RUN_ID"] = RUN_ID
        assert main(["export", str(folder), "--output", str(out)]) == 0
    finally:
        os.environ.pop("OTEL_PROFILER_RUN_ID", None)
        os.environ.update(saved)
    return list(pb_requests(out))
