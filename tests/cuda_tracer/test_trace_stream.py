"""Streaming import: a trace read in pieces cut at event boundaries gives, column for column, the
profile of the same trace decoded and converted whole; decimal timestamps converted from their
text equal exact decimal arithmetic."""

from __future__ import annotations

import gc
import gzip
import json
import re
from decimal import Decimal

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ALL_TRACES, trace
from cuda_tracer.profile import TraceError
from cuda_tracer.trace_json import files as trace_files
from cuda_tracer.trace_json import stream as trace_stream
from cuda_tracer.trace_json.convert import convert_part
from cuda_tracer.trace_json.files import finish
from cuda_tracer.trace_input import text_chunks
from cuda_tracer.trace_json.stream import decode_document, read_stream
from cuda_tracer.trace_json.times import decimal_ns


def read_in_pieces(path: str, piece_bytes: int, chunk_bytes: int = 1 << 16):
    """The profile of ``path`` read in pieces, and how many pieces were cut."""
    parts = []
    doc = read_stream(path, text_chunks(path, chunk_bytes=chunk_bytes),
                      lambda events: parts.append(convert_part(events)), piece_bytes=piece_bytes)
    cut = len(parts)
    return finish(path, doc, parts), cut


def read_whole(path: str):
    text = b"".join(text_chunks(path))
    return finish(path, decode_document(path, text), [])


def assert_same(a, b) -> None:
    assert a.meta == b.meta
    for column, values in a.batch.columns.items():
        assert values.dtype == b.batch.columns[column].dtype, column
        np.testing.assert_array_equal(values, b.batch.columns[column], column)
    assert a.batch.strings == b.batch.strings
    np.testing.assert_array_equal(a.batch.extra_row, b.batch.extra_row)
    np.testing.assert_array_equal(a.batch.extra_key, b.batch.extra_key)
    assert a.batch.extra_value == b.batch.extra_value


@pytest.mark.parametrize("path", ALL_TRACES, ids=lambda p: p.name[:40])
def test_every_trace_read_in_pieces_equals_it_read_whole(path):
    whole = read_whole(str(path))
    size = len(b"".join(text_chunks(str(path))))
    piece = max(4096, size // 7)
    streamed, parts = read_in_pieces(str(path), piece_bytes=piece, chunk_bytes=piece // 3)
    assert parts >= 3 or size < 40_000  # really cut into pieces
    assert_same(streamed, whole)
    assert len(whole.batch) > 0


@pytest.mark.parametrize("bytes_per_row", [1, 1 << 20], ids=["room-to-spare", "columns-grow"])
@pytest.mark.parametrize("path", ALL_TRACES, ids=lambda p: p.name[:40])
def test_every_trace_read_by_threads_and_joined_as_it_comes_equals_it_read_whole(path, bytes_per_row,
                                                                                 monkeypatch):
    """The threaded read (one thread decompresses, one scans, this one converts each piece and
    joins it at once; the first piece smaller), with the columns sized beyond the rows or growing
    past their estimate."""
    size = len(b"".join(text_chunks(str(path))))
    piece = max(4096, size // 7)
    original = trace_files.read_stream
    monkeypatch.setattr(trace_files, "THREADED_TEXT", 0)
    monkeypatch.setattr(trace_files, "TEXT_BYTES_PER_ROW", bytes_per_row)
    monkeypatch.setattr(trace_files, "read_stream", lambda path, chunks, emit, **_: original(
        path, chunks, emit, piece_bytes=piece, first_piece_bytes=max(2048, piece // 3)))
    whole = read_whole(str(path))
    assert_same(trace_files.read_trace(str(path)), whole)


@pytest.mark.parametrize("collector", [True, False], ids=["collector-on", "collector-off"])
@pytest.mark.parametrize("advice", [True, False], ids=["advice-on", "advice-off"])
def test_a_read_pauses_the_collector_and_huge_page_advice_and_restores_them(collector, advice, monkeypatch):
    """While a file is read, Python's cycle collector and numpy's huge-page advice are off (fresh
    arrays filled once fault in faster as small pages); after it, both are as the read found them."""
    _set_madvise_hugepage = trace_files._huge_page_advice()
    if _set_madvise_hugepage is None:
        pytest.skip("this numpy has no huge-page advice to switch")

    def advice_now() -> bool:
        was = _set_madvise_hugepage(False)
        _set_madvise_hugepage(was)
        return was

    seen = []
    original = trace_files.convert_part

    def converting(*args, **kwargs):
        seen.append((gc.isenabled(), advice_now()))
        return original(*args, **kwargs)

    monkeypatch.setattr(trace_files, "convert_part", converting)
    was_enabled, was_advised = gc.isenabled(), _set_madvise_hugepage(advice)
    (gc.enable if collector else gc.disable)()
    try:
        trace_files.read_trace(str(ALL_TRACES[0]))
        assert seen and set(seen) == {(False, False)}
        assert (gc.isenabled(), advice_now()) == (collector, advice)
    finally:
        (gc.enable if was_enabled else gc.disable)()
        _set_madvise_hugepage(was_advised)


def test_pieces_cut_inside_strings_and_nested_values_are_not_taken(tmp_path):
    """Event text full of `}, {` inside strings and nested lists: every cut there is refused."""
    trap = '"}, {\\"ph\\": \\"X\\"}, {"'
    events = [{"ph": "X", "cat": "kernel", "name": f"k{i % 7}{trap}", "ts": 1000 + i, "dur": 3,
               "pid": 0, "tid": 7, "args": {"nested": [{"a": 1}, {"b": trap}], "stream": 7,
                                             "correlation": i}}
              for i in range(400)]
    path = tmp_path / "trap.json"
    path.write_text(json.dumps({"traceEvents": events, "baseTimeNanoseconds": 5}, indent=1))
    whole = read_whole(str(path))
    for piece in (300, 1000, 5000):
        streamed, parts = read_in_pieces(str(path), piece, chunk_bytes=777)
        assert parts > 3
        assert_same(streamed, whole)
    assert len(whole.batch) == 400 and whole.batch.names()[0] == "k0" + trap


def test_the_first_piece_is_handed_on_before_the_next_text_is_read(tmp_path):
    """A smaller first piece goes out as soon as the text read with the head holds it: a reader
    scanning in another thread starts on it while the rest is still being decompressed."""
    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i % 5}", "ts": 10 * i, "dur": 3, "pid": 1,
               "tid": 1} for i in range(3000)]
    text = json.dumps({"traceEvents": events}).encode()
    first, rest = text[:60_000], text[60_000:]
    seen: list[str] = []

    def chunks():
        yield first
        seen.append("second chunk read")
        yield rest

    def on_events(piece) -> None:
        seen.append("piece")

    read_stream("first-piece.json", chunks(), on_events, piece_bytes=100_000, first_piece_bytes=20_000)
    assert seen[:2] == ["piece", "second chunk read"] and seen.count("piece") >= 2, seen


@pytest.mark.parametrize("after", ['', ', "traceName": "t", "baseTimeNanoseconds": 5',
                                   ', "deviceProperties": [{"id": 0, "name": "A100"}]',
                                   ', "logs": ["a}]", "x.cpp:12] y"], "distributedInfo": {"rank": 3}'])
@pytest.mark.parametrize("last_name", ["k", "k}]", "}] , {"])
def test_the_last_piece_ends_where_the_event_array_does(tmp_path, monkeypatch, after, last_name):
    """The rest of the text is one piece up to the array's ``]``, found from the end; a ``]`` after
    a ``}`` in the fields after the array (or in the last event's strings) is not taken for it:
    then all but the last event are one piece, as before."""
    events = [{"ph": "X", "cat": "kernel", "name": f"k{i % 5}", "ts": 1000 + i, "dur": 2, "pid": 0,
               "tid": 7, "args": {"correlation": i}} for i in range(300)]
    events[-1]["name"] = last_name
    path = tmp_path / "t.json"
    path.write_text('{"schemaVersion": 1, "traceEvents": ' + json.dumps(events, indent=1) + after + "}")
    monkeypatch.setattr(trace_stream, "TAIL_BYTES", 1000)
    parts: list = []
    doc = read_stream(str(path), text_chunks(str(path)), lambda e: parts.append(convert_part(e)))
    left = len(doc.traceEvents or [])
    assert_same(finish(str(path), doc, parts), read_whole(str(path)))
    assert left == (1 if "deviceProperties" in after else 0)


PIECE_EVENT = st.fixed_dictionaries({
    "ph": st.sampled_from(["X", "X", "i", "M", "s", "f", "Q"]),
    "name": st.text(alphabet='ab}{,[] "\\', max_size=12),
    "ts": st.one_of(st.integers(0, 10**16), st.decimals(0, 10**13, places=3).map(float),
                    st.sampled_from(["1e3", None, "x"])),
    "dur": st.integers(0, 10**6),
    "args": st.one_of(st.just({}), st.dictionaries(st.sampled_from(["stream", "l", "}, {"]),
                                                   st.one_of(st.integers(), st.lists(st.dictionaries(
                                                       st.text(alphabet="}{,", max_size=3),
                                                       st.integers(), max_size=2), max_size=2)),
                                                   max_size=3))})


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(events=st.lists(PIECE_EVENT, min_size=1, max_size=40), piece=st.integers(40, 2000),
       indent=st.sampled_from([None, 0, 2]))
def test_any_event_list_streams_as_it_reads_whole(tmp_path_factory, events, piece, indent):
    path = tmp_path_factory.mktemp("pieces") / "t.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events, "traceName": "x"},
                               indent=indent))
    try:
        whole = read_whole(str(path))
    except TraceError:
        with pytest.raises(TraceError):
            read_in_pieces(str(path), piece, chunk_bytes=97)
        return
    streamed, _ = read_in_pieces(str(path), piece, chunk_bytes=97)
    assert_same(streamed, whole)


@pytest.mark.parametrize("path", ALL_TRACES, ids=lambda p: p.name[:40])
def test_timestamps_from_text_equal_exact_decimal_arithmetic(path):
    text = gzip.open(path).read()
    values = re.findall(rb'"(?:ts|dur)": ?(-?[0-9.]+)[,}\s]', text)
    assert values
    assert decimal_ns(values).tolist() == [int(Decimal(v.decode()) * 1000) for v in values]


@pytest.mark.parametrize("text, expected", [
    (b"0", 0), (b"-0", 0), (b"1.5", 1500), (b"-1.0005", -1000), (b"12.3456789", 12345),
    (b"0.0009", 0), (b"1712195495406752.797", 1712195495406752797), (b"-12.05", -12050),
    (b"3.000000000000000001", 3000)])
def test_decimal_texts_are_cut_below_a_nanosecond_as_decimal_arithmetic_does(text, expected):
    assert decimal_ns([b"7", text]).tolist() == [7000, expected] == [
        7000, int(Decimal(text.decode()) * 1000)]


@pytest.mark.parametrize("text", [b"1e3", b"null", b'"5"', b"99999999999999999", b"4611686018427388",
                                  b"1.00000000000000000000001"])
def test_texts_outside_the_vectorized_path_are_left_to_the_exact_one(text):
    assert decimal_ns([b"1", text]) is None


def test_a_trace_with_exponents_and_nulls_still_reads_exactly(tmp_path):
    path = tmp_path / "odd.json"
    path.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "a", "ts": 1.5e3, "dur": null},'
                    '{"ph": "X", "cat": "kernel", "name": "b", "ts": 2000.25, "dur": 1E1},'
                    '{"ph": "X", "cat": "kernel", "name": "c", "ts": "late", "dur": 1}]}')
    rank = read_whole(str(path))
    assert rank.batch.start_ns.tolist() == [1_500_000, 2_000_250]
    assert rank.batch.end_ns.tolist() == [1_500_000, 2_010_250]
    assert rank.meta["skipped_events"] == 1


def test_invalid_json_in_the_middle_of_a_streamed_trace_is_one_clear_error(tmp_path):
    events = [{"ph": "X", "cat": "kernel", "name": f"k{i}", "ts": i, "dur": 1} for i in range(3000)]
    text = json.dumps({"traceEvents": events}, indent=1)
    middle = text.index('"k1500"')
    path = tmp_path / "broken.json"
    path.write_text(text[:middle] + '"k1500" oops' + text[middle + 7:])
    with pytest.raises(TraceError) as whole:
        read_whole(str(path))
    with pytest.raises(TraceError) as streamed:
        read_in_pieces(str(path), 2000, chunk_bytes=1000)
    assert "invalid JSON" in str(whole.value) and "invalid JSON" in str(streamed.value)


READ_BY_PROCESSES = """
import json, pickle, sys
from cuda_tracer import trace_input
from cuda_tracer.trace_json import files as trace_files, parallel as trace_parallel, stream as trace_stream
trace_files.MIN_PARALLEL_TEXT = 0  # every file, however small
trace_files.text_chunks = lambda path, limit=None, progress=None: trace_input.text_chunks(
    path, limit, int(sys.argv[2]) // 2, progress)
pieces = []

def small_pieces(path, chunks, on_events, decode=True):
    def counted(piece):
        pieces.append(decode)
        on_events(piece)
    return trace_stream.read_stream(path, chunks, counted, int(sys.argv[2]), decode)

trace_files.read_stream = trace_parallel.read_stream = small_pieces
serial = trace_files.read_trace(sys.argv[1])
parallel = trace_files.read_trace(sys.argv[1], workers=2)
print(json.dumps({"serial": pieces.count(True), "parallel": pieces.count(False)}))
pickle.dump((serial, parallel), open(sys.argv[3], "wb"))
"""


@pytest.mark.parametrize("name", ["tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
                                  "hta/nccl_parser_config/nccl_data.json.gz"])
def test_pieces_decoded_by_reader_processes_equal_one_process(tmp_path, name):
    """Run in a fresh interpreter (readers are forked only from a single-threaded process)."""
    import pickle
    import subprocess
    import sys

    out = tmp_path / "ranks.pickle"
    result = subprocess.run([sys.executable, "-c", READ_BY_PROCESSES, str(trace(name)), "500000",
                             str(out)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    pieces = json.loads(result.stdout)
    assert pieces["parallel"] == pieces["serial"] >= 5  # the pool really converted pieces
    serial, parallel = pickle.loads(out.read_bytes())
    assert_same(parallel, serial)
    assert len(serial.batch) > 10_000
