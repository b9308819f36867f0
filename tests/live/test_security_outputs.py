"""Security of a live job's outputs: listening sockets on 127.0.0.1 only, the OTLP header secret in
no output (stderr, stdout, profile folder, spool), user-only profile folders.

Referenced, not repeated: TLS and basic auth of /metrics (``test_metrics_endpoint.py``), hostile
names staying text in the HTML report (``test_report_browser.py::test_hostile_names_stay_text``).
"""

from __future__ import annotations

import stat
import subprocess
import sys
import time

import pytest

from fault_kit import JOB, FaultyReceiver, HttpEndpoint, job_env, otlp_env
from otlp_receiver import free_port

psutil = pytest.importorskip("psutil")
pytest.importorskip("torch")

SECRET = "Bearer-s3cr3t-4f9a"


def listening(pid: int) -> list[str]:
    procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    pids = {p.pid for p in procs}
    return [c.laddr.ip for c in psutil.net_connections("inet")
            if c.pid in pids and c.status in (psutil.CONN_LISTEN, psutil.CONN_NONE) and c.laddr]


def test_sockets_secret_and_permissions_of_a_live_job(tmp_path):
    with FaultyReceiver("errors") as receiver:  # refused: the secret travels in retries and the spool
        env = job_env(tmp_path / "prof", **otlp_env(receiver.endpoint("http/protobuf"), "http/protobuf",
                                                    tmp_path / "spool"),
                      OTEL_EXPORTER_OTLP_HEADERS=f"authorization={SECRET}",
                      OTEL_PROFILER_PROMETHEUS_PORT=str(free_port()),
                      OTEL_PROFILER_TRIGGER_PORT=str(free_port()))  # a Unix socket: test_socket_bounds.py
        stop = tmp_path / "stop"
        proc = subprocess.Popen([sys.executable, JOB, "--steps", "0", "--ready", "30", "--step-sleep", "0.03",
                                 "--until", str(stop)],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline().strip() == "ready"
            deadline = time.monotonic() + 120  # /metrics starts in the flush thread: wait for it
            while not (addresses := listening(proc.pid)) and time.monotonic() < deadline:
                time.sleep(0.2)
            stop.touch()
            out, err = proc.communicate(timeout=300)
        finally:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert addresses and set(addresses) == {"127.0.0.1"}, addresses  # /metrics
    assert SECRET not in out + err
    for path in [*(tmp_path / "prof").rglob("*"), *(tmp_path / "spool").rglob("*")]:
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    for folder in (tmp_path / "prof", tmp_path / "spool"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
        assert list(folder.iterdir())
        for path in folder.iterdir():
            assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, path  # no group/other access
    # nor in what the tools make of the folder: summary, HTML report, OTLP JSON export
    from otel_profiler.cli import main

    for args in (["summary", str(tmp_path / "prof"), "--format", "json", "-o", str(tmp_path / "s.json")],
                 ["report", str(tmp_path / "prof"), "-o", str(tmp_path / "r.html")],
                 ["export", str(tmp_path / "prof"), "--output", str(tmp_path / "e.jsonl")]):
        assert main(args) == 0
    for name in ("s.json", "r.html", "e.jsonl"):
        assert SECRET not in (tmp_path / name).read_text()


SCRIPTS = ["</script><script>window.pwned=1</script>", "<SCRIPT src=//x></SCRIPT>", "<script\tdefer>"]


def _trace(names: list[str]) -> dict:
    """Kernels, their launches, an annotation and a thread name, all carrying ``names``."""
    events = [{"ph": "X", "cat": "kernel", "name": n, "pid": 0, "tid": 7, "ts": 100 + 10 * i, "dur": 5,
               "args": {"device": 0, "stream": 7, "correlation": i + 1}} for i, n in enumerate(names)]
    events += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                "ts": 95 + 10 * i, "dur": 2, "args": {"correlation": i + 1}} for i in range(len(names))]
    events += [{"ph": "X", "cat": "user_annotation", "name": names[0], "pid": 1, "tid": 1, "ts": 90, "dur": 60},
               {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": names[1]}}]
    return {"traceEvents": events}


def test_report_html_has_no_script_tag_from_trace_names(tmp_path):
    """Static check (the browser check is ``test_report_browser.py::test_hostile_names_stay_text``):
    a report of hostile names has exactly as many ``<script`` as one of harmless names."""
    import gzip
    import json

    from cuda_tracer.loading import load_profile
    from otel_profiler.report.html import write_report

    pages = []
    for tag, names in (("hostile", SCRIPTS), ("plain", ["k1", "k2", "k3"])):
        path = tmp_path / f"{tag}.json.gz"
        path.write_bytes(gzip.compress(json.dumps(_trace(names)).encode()))
        write_report(load_profile([str(path)]), str(tmp_path / f"{tag}.html"))
        pages.append((tmp_path / f"{tag}.html").read_text())
    hostile, plain = pages
    assert hostile.lower().count("<script") == plain.lower().count("<script") > 0
    for name in SCRIPTS:
        assert name not in hostile


# ------------------------------------------------------------------ files written by the CLI
def test_summary_and_report_files_are_user_only(tmp_path):
    from conftest import trace
    from otel_profiler.cli import main

    source = str(trace("hta/trace_filter/sampled_rank-0.json.gz"))
    outputs = {"summary.txt": ["summary", source, "-o"], "summary.json": ["summary", source, "--format", "json", "-o"],
               "report.html": ["report", source, "-o"], "trace.json": ["report", source, "--format", "perfetto", "-o"]}
    for name, args in outputs.items():
        assert main([*args, str(tmp_path / name)]) == 0
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o600, name


# -------------------------------------------------------- what an endpoint says is not echoed
HOSTILE = f"\x1b[2J\x1b[31mauthorization: {SECRET}\x1b[0m"


class _HostileHttp(HttpEndpoint):
    """OTLP/HTTP endpoint answering 400 with a status text and a body full of escape sequences
    and the credentials it received."""

    def __init__(self) -> None:
        from http.server import BaseHTTPRequestHandler

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                body = (HOSTILE + " " + self.headers.get("authorization", "")).encode()
                self.send_response(400, "Bad \x1b[5mRequest " + SECRET)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        super().__init__(Handler)


def _hostile_grpc():
    from concurrent import futures

    import grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

    class Servicer(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request, context):  # noqa: N802
            echoed = dict(context.invocation_metadata()).get("authorization", "")
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, HOSTILE + " " + echoed)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Servicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"http://127.0.0.1:{port}"


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_an_endpoint_reply_is_never_printed_verbatim(tmp_path, protocol):
    import os

    from conftest import trace

    if protocol == "grpc":
        server, endpoint = _hostile_grpc()
        stop = lambda: server.stop(0)  # noqa: E731
    else:
        http = _HostileHttp()
        endpoint, stop = http.endpoint, http.close
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(OTEL_EXPORTER_OTLP_HEADERS=f"authorization={SECRET}", OTEL_PROFILER_EXPORT_RETRY_S="0")
    try:
        done = subprocess.run([sys.executable, "-m", "otel_profiler", "export",
                               str(trace("hta/trace_filter/sampled_rank-0.json.gz")), "--endpoint", endpoint,
                               "--protocol", protocol], env=env, capture_output=True, text=True, timeout=300)
    finally:
        stop()
    assert done.returncode == 1, done.stderr  # refused: dropped, counted
    assert SECRET not in done.stderr and "\x1b" not in done.stderr, repr(done.stderr)
    refused = [line for line in done.stderr.splitlines() if "refused spans" in line]
    assert len(refused) == 1 and ("HTTP 400" in refused[0] or "INVALID_ARGUMENT" in refused[0]), done.stderr
    assert len(refused[0]) < 300


def test_events_with_out_of_range_times_are_noted_in_the_console_summary(tmp_path):
    import json

    from otel_profiler.cli import main

    events = _trace(["k1", "k2", "k3"])["traceEvents"]
    events.append({"ph": "X", "cat": "kernel", "name": "far", "pid": 0, "tid": 7, "ts": 1e30, "dur": 5,
                   "args": {"device": 0, "stream": 7, "correlation": 99}})
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    out = tmp_path / "summary.txt"
    assert main(["summary", str(path), "-o", str(out)]) == 0
    notes = [line for line in out.read_text().splitlines() if line.startswith("note:")]
    assert any("1 trace events were skipped" in line and "out of range" in line for line in notes), notes
