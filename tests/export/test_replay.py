"""``otel-profiler replay``: every file is tried; requests the receiver refuses stay, in files that
are named, and are tried again by a later replay; an unreachable endpoint leaves everything for
later. Real requests, a real receiver built on opentelemetry-proto."""

from __future__ import annotations

import subprocess
import sys
from http.server import BaseHTTPRequestHandler

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_profiler.export.otlp import write_delimited
from fault_kit import HttpEndpoint
from otlp_receiver import free_port

REFUSE = b"refuse-me"


def request(service: str, n: int) -> bytes:
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    attr = rs.resource.attributes.add()
    attr.key, attr.value.string_value = "service.name", service
    for i in range(n):
        span = rs.scope_spans.add().spans.add() if i == 0 else rs.scope_spans[0].spans.add()
        span.trace_id, span.span_id, span.name = bytes([1] * 16), bytes([i + 1] * 8), f"{service}-{i}"
    return req.SerializeToString()


class PickyReceiver(HttpEndpoint):
    """OTLP/HTTP receiver refusing (HTTP 400) every request that carries ``REFUSE``."""

    def __init__(self) -> None:
        self.accepted: list[ExportTraceServiceRequest] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                ok = REFUSE not in body
                if ok:
                    receiver.accepted.append(ExportTraceServiceRequest.FromString(body))
                self.send_response(200 if ok else 400)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        super().__init__(Handler)


def replay(spool, endpoint: str, **env: str) -> subprocess.CompletedProcess:
    import os

    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    environ.update(env)
    return subprocess.run([sys.executable, "-m", "otel_profiler", "replay", str(spool), "--endpoint", endpoint],
                          capture_output=True, text=True, timeout=300, env=environ)


def make_spool(folder) -> None:
    folder.mkdir()
    for name, services in (("spool-1-000001.pb", ["a", "b"]), ("spool-1-000002.pb", ["c", REFUSE.decode(), "d"]),
                           ("spool-1-000003.pb", ["e"])):
        with open(folder / name, "wb") as f:
            for service in services:
                write_delimited(f, request(service, 3))


def names(requests) -> set[str]:
    return {r.resource_spans[0].resource.attributes[0].value.string_value for r in requests}


def test_replay_sends_every_file_names_the_refused_one_and_keeps_it(tmp_path):
    spool = tmp_path / "spool"
    make_spool(spool)
    receiver = PickyReceiver()
    try:
        done = replay(spool, receiver.endpoint)
    finally:
        receiver.close()
    assert done.returncode == 1, done.stderr
    assert names(receiver.accepted) == {"a", "b", "c", "d", "e"}  # past the refused request and file
    assert sorted(p.name for p in spool.iterdir()) == ["spool-1-000002.pb"]  # only what was refused stays
    kept = [line for line in done.stderr.splitlines() if "kept" in line]
    assert any("spool-1-000002.pb" in line and "HTTP 400" in line for line in kept), done.stderr
    assert "Traceback" not in done.stderr
    # Later, a receiver that takes it: the spool empties.
    with_all = PickyReceiver()
    try:
        import otel_profiler  # noqa: F401

        global REFUSE
        saved, REFUSE = REFUSE, b"\x00never"
        try:
            again = replay(spool, with_all.endpoint)
        finally:
            REFUSE = saved
    finally:
        with_all.close()
    assert again.returncode == 0, again.stderr
    assert names(with_all.accepted) == {REFUSE.decode()} and not list(spool.iterdir())


def test_replay_to_an_unreachable_endpoint_leaves_every_file(tmp_path):
    spool = tmp_path / "spool"
    make_spool(spool)
    before = {p.name: p.read_bytes() for p in spool.iterdir()}
    done = replay(spool, f"http://127.0.0.1:{free_port()}", OTEL_PROFILER_EXPORT_RETRY_S="0")
    assert done.returncode == 1, done.stderr
    assert {p.name: p.read_bytes() for p in spool.iterdir()} == before  # untouched, for later
    kept = [line for line in done.stderr.splitlines() if line.startswith("otel-profiler: kept")]
    assert len(kept) == 3 and "Connection refused" in kept[0], done.stderr


def test_replay_rejects_a_bad_endpoint_in_one_line(tmp_path):
    spool = tmp_path / "spool"
    make_spool(spool)
    for bad in ("not a url", "http://", "ftp://collector:4318"):
        done = replay(spool, bad)
        assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
        assert "--endpoint" in done.stderr and "Traceback" not in done.stderr


def _spans(requests) -> int:
    return sum(len(ss.spans) for r in requests for rs in r.resource_spans for ss in rs.scope_spans)


def test_replay_never_deletes_what_it_cannot_read_it_sets_it_aside_and_names_it(tmp_path):
    from otel_profiler.export.otlp import read_delimited, varint

    spool = tmp_path / "spool"
    spool.mkdir()
    whole = [request(s, 3) for s in ("a", "b", "c")]
    good = b"".join(varint(len(r)) + r for r in whole)
    truncated = good[:-5]  # a crash mid-write: the last request is cut short
    # A broken length prefix: the second request's length becomes 2**28 - 1 (past the end).
    second = len(varint(len(whole[0]))) + len(whole[0])
    broken = good[:second] + b"\xff\xff\xff\x7f" + good[second + len(varint(len(whole[1]))):]
    garbage = b"\xff\xff\xff\xff\x0f" + good  # unreadable from its first byte
    files = {"spool-1-aa-000001.pb": truncated, "spool-1-aa-000002.pb": broken, "spool-1-aa-000003.pb": garbage}
    for name, data in files.items():
        (spool / name).write_bytes(data)
    receiver = PickyReceiver()
    try:
        done = replay(spool, receiver.endpoint)
    finally:
        receiver.close()
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert names(receiver.accepted) == {"a", "b"}  # what could be read was sent: a, b | a | nothing
    assert sorted(p.name for p in spool.iterdir()) == sorted(f"{n}.bad" for n in files)  # nothing deleted
    lines = [line for line in done.stderr.splitlines() if line.startswith("otel-profiler: unreadable")]
    assert len(lines) == 3, done.stderr
    for name in files:
        (line,) = [x for x in lines if f"{spool / name} (" in x]
        assert f"kept in {spool / name}.bad" in line, line
    assert "truncated message at byte" in done.stderr and "3 unreadable file(s) set aside" in done.stderr
    # Each .bad holds exactly the part that was not read: with what was sent, nothing is missing.
    third = len(good) - len(varint(len(whole[2]))) - len(whole[2])
    assert (spool / "spool-1-aa-000001.pb.bad").read_bytes() == truncated[third:]
    assert (spool / "spool-1-aa-000002.pb.bad").read_bytes() == broken[second:]
    assert (spool / "spool-1-aa-000003.pb.bad").read_bytes() == garbage
    repaired = list(read_delimited(garbage[5:]))  # the bytes set aside are all there: 9 spans
    assert _spans(ExportTraceServiceRequest.FromString(r) for r in repaired) == 9
    # A second replay finds nothing left to send and nothing to set aside again.
    again = replay(spool, f"http://127.0.0.1:{free_port()}", OTEL_PROFILER_EXPORT_RETRY_S="0")
    assert again.returncode == 0 and "replayed 0 request(s) from 0 file(s)" in again.stderr, again.stderr
