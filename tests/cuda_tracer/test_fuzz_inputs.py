"""Fuzzing the trace reader and the environment-variable parser with hypothesis.

The only outcomes allowed: a valid result, or the documented clear error (``TraceError`` for a
trace, a warning in ``Settings.warnings`` for a variable). Anything else (an uncaught exception, a
hang) fails the test.
"""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import trace
from cuda_tracer.model.events import COLUMNS
from cuda_tracer.profile import RankProfile, TraceError
from cuda_tracer.trace_json.files import read_trace
from otel_profiler import config

JSON_LEAF = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
    st.sampled_from(["0x1f", "stream 7", "Spans", "1e400", "-0", "NaN", "\u202e\u0000"]))
JSON_VALUE = st.recursive(JSON_LEAF, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)),
    max_leaves=12)
CATEGORIES = st.sampled_from(["kernel", "Kernel", "gpu_memcpy", "cuda_runtime", "cuda_driver",
                              "cpu_op", "user_annotation", "cuda_sync", "gpu_memset", "ac2g",
                              "python_function", "Trace", "weird", ""])
ID = st.one_of(JSON_LEAF, st.lists(JSON_LEAF, max_size=3))  # an integer field, or a list where one belongs
HUGE_TIMES = st.sampled_from(["1e300000", "1e999999999", "-1e999999999", "Infinity", "1712195495519695.8"])
ARGS = st.fixed_dictionaries({}, optional={
    "External id": ID, "correlation": ID, "device": ID, "stream": ID,
    "bytes": JSON_LEAF, "grid": JSON_VALUE, "block": JSON_VALUE, "cuda_sync_kind": JSON_LEAF,
    "registers per thread": JSON_LEAF, "Total Allocated": JSON_LEAF, "Collective name": JSON_LEAF,
    "graph id": JSON_LEAF, "name": JSON_LEAF})
EVENT = st.fixed_dictionaries({}, optional={
    "ph": st.sampled_from(["X", "i", "I", "M", "s", "f", "B", "E", "C", 7]),
    "cat": st.one_of(CATEGORIES, JSON_LEAF), "name": st.one_of(st.text(max_size=20), JSON_LEAF),
    "pid": ID, "tid": ID,
    "ts": st.one_of(st.integers(-2**66, 2**66), st.floats(allow_nan=True), st.text(max_size=8), HUGE_TIMES),
    "dur": st.one_of(st.integers(-2**66, 2**66), st.floats(allow_nan=True), st.none(), HUGE_TIMES),
    "args": st.one_of(ARGS, JSON_LEAF)})
DOCUMENT = st.one_of(
    st.fixed_dictionaries({"traceEvents": st.lists(EVENT, max_size=12)},
                          optional={"baseTimeNanoseconds": JSON_LEAF,
                                    "distributedInfo": JSON_VALUE,
                                    "deviceProperties": JSON_VALUE}),
    st.lists(EVENT, max_size=6), JSON_VALUE)


def check_result(result: RankProfile) -> None:
    batch = result.batch
    assert all(batch.columns[c].dtype == dt and batch.columns[c].shape == (len(batch),)
               for c, dt in COLUMNS.items())
    assert (batch.end_ns >= batch.start_ns).all()
    assert batch.name.max(initial=-1) < len(batch.strings)


@settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
@given(doc=DOCUMENT, compress=st.booleans())
def test_adversarial_documents_give_a_result_or_a_trace_error(tmp_path_factory, doc, compress):
    path = tmp_path_factory.mktemp("fuzz") / "t.json"
    text = json.dumps(doc, allow_nan=True).encode()
    path.write_bytes(gzip.compress(text) if compress else text)
    try:
        check_result(read_trace(str(path)))
    except TraceError as exc:
        assert str(path) in str(exc)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(cut=st.integers(min_value=0, max_value=24_000), flip=st.integers(min_value=0, max_value=255))
def test_truncated_and_corrupted_real_traces(tmp_path_factory, cut, flip):
    raw = trace("hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz").read_bytes()
    data = bytearray(raw[:cut])
    if data:
        data[len(data) // 2] ^= flip
    path = tmp_path_factory.mktemp("cut") / "t.json.gz"
    path.write_bytes(bytes(data))
    try:
        check_result(read_trace(str(path)))
    except TraceError as exc:
        assert str(path) in str(exc)


def test_deeply_nested_json_is_a_clear_error(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text('{"traceEvents": [{"args": ' + "[" * 100_000 + "]" * 100_000 + "}]}")
    try:
        check_result(read_trace(str(path)))
    except TraceError as exc:
        assert str(path) in str(exc)


@settings(max_examples=2000, deadline=None)
@given(values=st.dictionaries(st.sampled_from(sorted(config.VARIABLES)),
                              st.text(max_size=40), max_size=8))
def test_environment_parser_never_raises(values):
    loaded = config.load(values)
    for name, var in config.VARIABLES.items():
        assert name in loaded.values
        if var.secret and values.get(name):
            own = [w for w in loaded.warnings if w.startswith(name + "=")]
            assert all(w.startswith(f"{name}=<hidden>:") for w in own)
    for warning in loaded.warnings:
        assert warning.split("=", 1)[0] in values


def test_non_standard_json_numbers_are_a_clear_error(tmp_path):
    path = tmp_path / "nan.json"
    path.write_text('{"traceEvents": [{"ph": "X", "name": "k", "ts": NaN, "dur": Infinity}]}')
    try:
        read_trace(str(path))
    except TraceError as exc:
        assert "invalid JSON" in str(exc) and str(path) in str(exc)
    else:
        raise AssertionError("NaN and Infinity are not JSON")


def test_numbers_at_the_edges_stay_finite(tmp_path):
    path = tmp_path / "edge.json"
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 1e300, "dur": 1},
        {"ph": "X", "cat": "kernel", "name": "k2", "ts": 5, "dur": 2,
         "args": {"stream": 2**80, "bytes": -1e30, "grid": [1, "x", 1e30]}}]}))
    result = read_trace(str(path))
    check_result(result)
    assert len(result.batch) == 1 and result.meta["skipped_events"] == 1
    assert int(result.batch.stream[0]) == -1 and np.array_equal(
        [result.batch.grid_x[0], result.batch.grid_y[0]], [1, -1])


# ----------------------------------------------------------------- OTLP headers (issue 9)
SECRET = "s3cr3t-Value"
HEADER_TEXT = st.lists(st.one_of(
    st.builds(lambda k, v: f"{k}={v}", st.text(max_size=12), st.text(max_size=12).map(lambda v: SECRET + v)),
    st.text(max_size=20), st.sampled_from(["=", ",,", "%", "%zz", "k=%00", " = ", "\u00e9=\u00e9"])),
    max_size=6).map(",".join)


@settings(max_examples=1500, deadline=None)
@given(text=HEADER_TEXT, general=st.booleans())
def test_otlp_headers_parse_or_warn_and_never_show_a_value(text, general):
    from otel_profiler.shared.otlp_target import resolve_target

    name = "OTEL_EXPORTER_OTLP_HEADERS" if general else "OTEL_EXPORTER_OTLP_TRACES_HEADERS"
    loaded = config.load({name: text, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"})
    headers = loaded.values[name]
    assert headers is None or isinstance(headers, dict)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in (headers or {}).items())
    target = resolve_target(loaded.values)
    for shown in [*loaded.warnings, target.describe(), repr(loaded.warnings)]:
        assert SECRET not in shown


# ----------------------------------------------------------------- profile folders (issue 9)
@pytest.fixture(scope="module")
def saved_batch(tmp_path_factory) -> bytes:
    rank = read_trace(str(trace("hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz")))
    path = tmp_path_factory.mktemp("saved") / "b.events"
    rank.batch.take(np.arange(min(300, len(rank.batch)))).save(str(path))
    return path.read_bytes()


def _load_events_file(folder, data: bytes):
    from cuda_tracer.loading import load_profile

    (folder / "rank-0.00000.events").write_bytes(data)
    try:
        profile = load_profile([str(folder)])
    except TraceError as exc:
        assert "rank-0.00000.events" in str(exc)
        return None
    check_result(profile.ranks[0])
    return profile


@settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
@given(cut=st.integers(min_value=0, max_value=1 << 16), flips=st.lists(
    st.tuples(st.integers(min_value=0, max_value=1 << 16), st.integers(min_value=1, max_value=255)), max_size=3))
def test_corrupt_events_files_give_a_profile_or_a_trace_error(tmp_path_factory, saved_batch, cut, flips):
    """Truncated and bit-flipped ``.events`` files, by the thousand."""
    data = bytearray(saved_batch[:cut] if cut < len(saved_batch) else saved_batch)
    for pos, bits in flips:
        if data:
            data[pos % len(data)] ^= bits
    _load_events_file(tmp_path_factory.mktemp("prof"), bytes(data))


def test_corrupt_deflate_stream_is_a_trace_error(tmp_path, saved_batch):
    data = bytearray(saved_batch)
    data[41] ^= 2  # inside header.json's deflate stream (found by the fuzz test above)
    assert _load_events_file(tmp_path, bytes(data)) is None  # a TraceError, not a profile


META_KEYS = st.sampled_from(["rank", "world_size", "source", "host_name", "versions", "resource",
                             "device_properties", "processes", "threads", "pid", "run_id", "other"])
META = st.one_of(JSON_VALUE, st.dictionaries(META_KEYS, st.one_of(JSON_VALUE, st.just(0)), max_size=6))


@settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
@given(meta=META)
def test_any_rank_metadata_gives_a_usable_profile_or_a_trace_error(tmp_path_factory, saved_batch, meta):
    """Whatever ``rank-0.json`` holds: the rank is read and summarized, or refused by name."""
    from cuda_tracer.loading import load_profile
    from otel_profiler.analysis.summary import summarize
    from otel_profiler.export.otlp import key_value
    from otel_profiler.spans.attributes import resource_attributes
    from otel_profiler.spans.options import SpanOptions

    folder = tmp_path_factory.mktemp("meta")
    (folder / "rank-0.00000.events").write_bytes(saved_batch)
    (folder / "rank-0.json").write_text(json.dumps(meta, allow_nan=True))
    try:
        profile = load_profile([str(folder)])
    except TraceError as exc:
        assert exc.path == str(folder / "rank-0.json")
        return
    rank = profile.ranks[0]
    assert rank.rank == 0 and rank.meta["file"] == str(folder / "rank-0.json")
    summarize(profile)
    for key, value in resource_attributes(rank.meta, SpanOptions(), "run", 0).items():
        key_value(key, value)
