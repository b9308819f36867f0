"""The native scanner (cuda_tracer/trace_json/_scan.c) against the Python reader, which defines the results:
every repository trace, and generated events of every shape the scanner reads itself or hands back
(string and odd pids, decimal and odd times, escapes, call stacks, collectives, metadata, unusual
phases, junk args), read both ways must give the same profile, column for column."""

from __future__ import annotations

import gzip
import json
import os
import threading
from contextlib import closing

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ALL_TRACES
from cuda_tracer.trace_json import convert as trace_convert, scan as trace_scan, stream as trace_stream
from cuda_tracer.profile import TraceError
from cuda_tracer.trace_json.files import read_trace
from cuda_tracer.trace_json.read_ahead import ahead, read_ahead
from cuda_tracer.trace_input import text_chunks
from test_trace_stream import assert_same

pytestmark = pytest.mark.skipif(not trace_scan.native_scanner() and not os.environ.get("CI"),
                                reason="the native scanner is not built here (no C compiler)")


def read_both(path: str, monkeypatch) -> tuple:
    """The file read the Python way, then by the scanner; and how many pieces were scanned."""
    monkeypatch.setenv("OTEL_PROFILER_PURE_PYTHON", "1")
    python = read_trace(path)
    monkeypatch.setenv("OTEL_PROFILER_PURE_PYTHON", "0")
    scanned = []
    original = trace_convert._scanned_fields
    monkeypatch.setattr(trace_convert, "_scanned_fields",
                        lambda piece: scanned.append(len(piece)) or original(piece))
    native = read_trace(path)
    return python, native, scanned


def test_the_scanner_is_built_where_the_tests_run_in_ci():
    """CI installs with a C compiler: a scanner that failed to build must not pass unnoticed."""
    if os.environ.get("CI"):
        assert trace_scan.native_scanner()


@pytest.mark.parametrize("path", ALL_TRACES, ids=lambda p: p.name[:40])
def test_every_trace_scanned_equals_it_read_the_python_way(path, monkeypatch):
    python, native, scanned = read_both(str(path), monkeypatch)
    assert_same(native, python)
    if len(b"".join(text_chunks(str(path)))) > 2 * trace_stream.TAIL_BYTES:  # all but the last
        assert sum(scanned) >= len(python.batch) + python.meta["flow_events"] - 1


# ----------------------------------------------------------------------------- generated events
def _decimal(draw, negative: bool = False) -> str:
    whole = draw(st.integers(0 if not negative else -10**6, 10**15))
    frac = draw(st.sampled_from(["", ".5", ".746", ".1234567", ".0", ".999999999999999999"]))
    return f"{whole}{frac}"


ODD_TIMES = ["1e3", "null", '"12"', "[]", "12345678901234567890", "-0.5", "1.5E2", "0", "-0", "0.25",
             "123456789012345678", "1234567890123456789.5", "12.1234567890123456789", "01"]
IDS = st.one_of(st.integers(-5, 2**40), st.sampled_from(
    ['"25738"', '"stream 7"', '"Traces"', '""', '"0x1A"', '" 12 "', '"inf"', '"nan"', '"1e3"',
     "1.5", "null", "true", '"12345678901234567"', '"-3"', '"7\\u0030"', "[1]", '{"a": 1}']))
ARG_VALUES = st.one_of(st.integers(-2**63, 2**63 - 1), st.sampled_from(
    ['"7"', "-1", "1.5", "null", "[1, 2, 3]", "[1, 2]", '[1, "2", 3]', "[]", '{"x": [1, {"y": 2}]}',
     '"\\u00e9\\n"', "true", "99999999999999999999", "-0", "0", "123456789012345678",
     "1234567890123456789", "9999999999999999999", "-9223372036854775809", "1E2", "-12e-1", "01"]))
ARG_KEYS = ["External id", "external id", "correlation", "device", "stream", "bytes", "grid",
            "block", "registers per thread", "shared memory", "graph id", "Collective name",
            "Call stack", "In msg nelems", "dtype", "Bytes", "Device Id", "Total Allocated",
            "Total Reserved", "Device Type", "cuda_sync_kind", "wait_on_stream", "name",
            "Input Dims", "Input dims", "Ev Idx", "Extern\\u0061l id", "Input\\u0020Dims",
            # near misses of the scanner's keys (same length, or one byte off)
            "devicE", "streams", "Bytez", "External iD", "graph_id", "blocks", "grid ", "Input Dimz"]
CATEGORIES = ["kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "cuda_sync", "cuda_runtime",
              "cuda_driver", "cpu_op", "Operator", "user_annotation", "gpu_user_annotation",
              "python_function", "trace", "Trace", "ac2g", "fwdbwd", "odd\\ncat", "CUSTOM"]
NAMES = ["ProfilerStep#3", "[memory]", "aten::mm", "cudaLaunchKernel", "Memcpy HtoD (Pageable -> Device)",
         "Memset (Device)", "cudaDeviceSynchronize", "Event Sync", "ncclKernel_AllReduce", "process_name",
         "thread_name", "k\\\"quoted\\\"", "caf\\u00e9", "é-utf8", "a\\ud83d\\ude00b"]


@st.composite
def events(draw):
    """One event's JSON text: usual fields in any order, values usual or odd."""
    fields = {}
    colon = draw(st.sampled_from([": ", ": ", ":", " : ", ":\n  "]))  # keys written every way
    fields["ph"] = json.dumps(draw(st.sampled_from("XXXXiIMsftBECP"))) if draw(
        st.integers(0, 300)) else draw(st.sampled_from(['"XX"', "1", '"\\u0058"']))
    if draw(st.integers(0, 20)):
        fields["name"] = '"' + draw(st.sampled_from(NAMES)) + '"'
    elif draw(st.booleans()):
        fields["name"] = draw(st.sampled_from(["7", "null", "[]"]))
    if draw(st.integers(0, 10)):
        fields["cat"] = '"' + draw(st.sampled_from(CATEGORIES)) + '"'
    elif draw(st.booleans()):
        fields["cat"] = draw(st.sampled_from(["7", "null", '["kernel"]']))
    for key in ("pid", "tid"):
        if draw(st.integers(0, 10)):
            value = draw(IDS)
            fields[key] = str(value) if isinstance(value, int) else value
    odd_time = draw(st.integers(0, 300)) == 0
    fields["ts"] = draw(st.sampled_from(ODD_TIMES)) if odd_time else _decimal(draw, True)
    if draw(st.integers(0, 5)):
        fields["dur"] = draw(st.sampled_from(ODD_TIMES)) if draw(st.integers(0, 300)) == 0 \
            else _decimal(draw)
    if draw(st.integers(0, 8)):
        keys = draw(st.lists(st.sampled_from(ARG_KEYS), max_size=6, unique=True))
        fields["args"] = "{" + ", ".join(f'"{k}"{colon}{_value(draw, k)}' for k in keys) + "}"
    elif draw(st.booleans()):
        fields["args"] = draw(st.sampled_from(["null", "[]", '"x"', "3"]))
    if draw(st.booleans()):
        fields["id"] = str(draw(st.integers(0, 100)))
    if draw(st.booleans()):  # a near miss of an event key
        fields[draw(st.sampled_from(["nam", "phx", "tS", "durs", "argz", "pi", "Name"]))] = "1"
    order = draw(st.permutations(list(fields)))
    if draw(st.integers(0, 30)) == 0:  # an escaped key that decodes to one of ours
        order = [k.replace("p", "\\u0070", 1) if k == "ph" else k for k in order]
        fields = {k.replace("p", "\\u0070", 1) if k == "ph" else k: v for k, v in fields.items()}
    return "{" + ", ".join(f'"{k}"{colon}{fields[k]}' for k in order) + "}"


def _value(draw, key: str) -> str:
    if key in ("grid", "block") and draw(st.booleans()):
        return json.dumps(draw(st.lists(st.integers(0, 2**31), min_size=3, max_size=3)))
    if key in ("Call stack", "Collective name", "dtype", "cuda_sync_kind", "Device Type", "name"):
        return draw(st.sampled_from(['""', '"a.py(1): f;b.py(2): g"', '"allreduce"', '"Float"',
                                     '"event"', '"cuda"', '"stream\\twait"', "null", "5"]))
    value = draw(ARG_VALUES)
    return str(value) if isinstance(value, int) else value


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(events(), min_size=1, max_size=40), st.booleans(), st.sampled_from([" ", "\n  "]))
def test_generated_events_scanned_equal_them_read_the_python_way(tmp_path_factory, events, wrapped,
                                                                  gap):
    text = "[" + ("," + gap).join(events) + "]"
    if wrapped:
        text = '{"schemaVersion": 1, "traceEvents": ' + text + ', "baseTimeNanoseconds": 1000}'
    path = tmp_path_factory.mktemp("gen") / "rank-3.trace.json"
    path.write_text(text, encoding="utf-8")
    outcomes = []
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(trace_stream, "TAIL_BYTES", 0)  # a small file is scanned too
        for pure in ("1", "0"):
            monkeypatch.setenv("OTEL_PROFILER_PURE_PYTHON", pure)
            try:
                outcomes.append(read_trace(str(path)))
            except TraceError as exc:
                outcomes.append(str(exc))
    python, native = outcomes
    if isinstance(python, str) or isinstance(native, str):
        assert native == python  # the same problem, in the same words
    else:
        assert_same(native, python)


def test_a_large_generated_file_is_scanned_piece_by_piece(tmp_path, monkeypatch):
    """Several pieces, string tids, call stacks and collectives among plain events."""
    lines = []
    for i in range(120_000):
        args = {"External id": i, "correlation": i + 7}
        if i % 97 == 0:
            args["Call stack"] = f"train.py({i % 13}): step;model.py(4): forward"
        if i % 211 == 0:
            args.update({"Collective name": "allreduce", "In msg nelems": i, "dtype": "Float"})
        lines.append(json.dumps({"ph": "X", "cat": "cpu_op" if i % 3 else "kernel",
                                 "name": f"op{i % 50}", "pid": 1, "tid": "stream 7" if i % 5 else 9,
                                 "ts": f"{1_700_000_000_000 + i}.{i % 1000:03d}", "dur": i % 17,
                                 "args": args}).replace('"ts": "', '"ts": ').replace('", "dur"',
                                                                                        ', "dur"'))
    path = tmp_path / "big.json.gz"
    with gzip.open(path, "wt") as f:
        f.write('{"traceEvents": [\n' + ",\n".join(lines) + "\n]}")
    python, native, scanned = read_both(str(path), monkeypatch)
    assert_same(native, python)
    assert len(scanned) >= 2 and sum(scanned) == 120_000  # the last piece ends where the array does


@pytest.mark.parametrize("text", ['[{"ph": "X", "name": "a}, {', '[{"ph": "X", "args": {"a": [1, 2]',
                                  '[{"ph": "M"}, 01]', '[{"ph": "X", "name": "a\\q"}]'])
def test_the_scanner_says_where_text_is_not_json(text):
    with pytest.raises(ValueError, match=r"\(byte \d+\)$"):
        trace_scan.scan_piece(text.encode())


def test_read_ahead_hands_on_chunks_and_errors_in_order_and_leaves_no_thread():
    def failing():
        yield b"a"
        yield b"b"
        raise TraceError("t.json", "corrupt or truncated gzip data")

    got = []
    with pytest.raises(TraceError, match="corrupt"):
        for chunk in read_ahead(failing()):
            got.append(chunk)
    assert got == [b"a", b"b"]

    closed = []

    def endless():
        try:
            while True:
                yield b"x"
        finally:
            closed.append(True)  # the file is closed by the thread that read it

    with closing(read_ahead(endless())) as ahead:
        assert next(ahead) == b"x"
    assert closed == [True]
    assert not [t for t in threading.enumerate() if t.name == "otel-profiler-read-ahead"]


@pytest.mark.parametrize("stop", ['\\"', "\\\\", "\\u00e9", "\\n", '"', "\x01", "\x1f"])
def test_strings_end_and_escape_at_every_place_of_a_word(stop):
    """The scanner tests string bytes sixteen (or eight) at a time: a quote, backslash, escape or
    raw control character is found at every offset within and across those blocks (a bare quote
    ends the name early; a raw control character is not JSON)."""
    for before in range(36):
        name = "a" * before + stop + "é" * (before % 3) + "b" * (35 - before)
        text = f'[{{"ph": "X", "name": "{name}", "ts": 1, "dur": 2}}, {{"ph": "M", "name": "x"}}]'
        try:
            expected = json.loads(text)[0]["name"]
        except ValueError:  # a bare quote inside: not JSON
            with pytest.raises(ValueError, match=r"\(byte \d+\)$"):
                trace_scan.scan_piece(text.encode())
            continue
        scanned = trace_scan.scan_piece(text.encode())
        assert scanned.strings[scanned.name[0]] == expected


def test_a_consumer_that_stops_ends_the_producer_at_its_next_item():
    """An error while converting stops the reading thread at once, not at the end of the file."""
    produced = []

    def produce(emit):
        for i in range(10_000):
            produced.append(i)
            emit(i)
        return "done"

    stream = ahead(produce, depth=2)
    with closing(stream):
        assert next(stream) == 0
    assert len(produced) <= 5  # the queue's two, the one being handed over, and little more
    assert not [t for t in threading.enumerate() if t.name == "otel-profiler-read-ahead"]
    finished = ahead(lambda emit: emit(1) or "value")
    assert list(finished) == [1]
