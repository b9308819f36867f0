"""The vectorized OTLP encoder (otel_profiler.export.otlp) parses, with the official opentelemetry-proto
classes, into exactly the spans of the span model: protobuf, OTLP JSON, request splitting."""

from __future__ import annotations

import base64
import io
import json

import numpy as np
import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from conftest import trace
from cuda_tracer.loading import load_profile
from otel_profiler.export.otlp import (any_value, encode_json_lines, encode_request, fixed_varints, read_delimited,
                                split_requests, varint_width, write_delimited)
from otel_profiler.spans.options import SpanOptions
from otel_profiler.spans.build import build_spans
from otel_profiler.spans.columns import AttrColumn
from otel_profiler.spans.table import SpanTable
from otlp_receiver import proto_span, table_spans


@pytest.fixture(scope="module")
def table() -> SpanTable:
    r = load_profile([str(trace("hta/nccl_parser_config/nccl_data.json.gz"))]).ranks[0]
    return build_spans(r.meta, r.batch, SpanOptions(budget=5000))


def _decode(requests: list[bytes]) -> tuple[list[dict], list[dict]]:
    spans, resources = [], []
    for raw in requests:
        req = ExportTraceServiceRequest.FromString(raw)
        for rs in req.resource_spans:
            resources.append({kv.key: kv.value for kv in rs.resource.attributes})
            for ss in rs.scope_spans:
                assert ss.scope.name == "otel_profiler"
                spans.extend(proto_span(s) for s in ss.spans)
    return spans, resources


def _by_id(spans: list[dict]) -> dict[str, dict]:
    out = {s["span"]: s for s in spans}
    assert len(out) == len(spans)
    return out


def test_protobuf_parses_into_exactly_the_model(table):
    spans, resources = _decode([encode_request(table)])
    assert _by_id(spans) == _by_id(table_spans(table))
    assert resources[0]["service.name"].string_value == table.resource["service.name"]
    assert resources[0]["otel_profiler.rank"].int_value == table.resource["otel_profiler.rank"]


@pytest.mark.parametrize("keys", ["all-equal", "two-values"])
def test_layout_keys_that_collide_never_mix_two_layouts(table, keys, monkeypatch):
    """Spans are grouped by a hash of their layout: where hashes collide (here: all of them, or
    every other span), the groups are split by layout, and every span still parses exactly."""
    from otel_profiler.export import otlp

    def colliding(t: SpanTable) -> np.ndarray:
        return np.zeros(len(t), np.uint64) if keys == "all-equal" else np.arange(len(t), dtype=np.uint64) % 2

    monkeypatch.setattr(otlp, "_group_keys", colliding)
    spans, _ = _decode([encode_request(table)])
    assert _by_id(spans) == _by_id(table_spans(table))


def test_split_requests_cover_every_span_once(table):
    parts = split_requests(table, max_request_bytes=64 * 1024)
    assert len(parts) > 5
    assert all(len(raw) < 64 * 1024 + 4096 for raw, _ in parts)
    spans, resources = _decode([raw for raw, _ in parts])
    assert sum(n for _, n in parts) == len(table) == len(spans)
    assert _by_id(spans) == _by_id(table_spans(table))
    assert len(resources) == len(parts)


def _json_to_proto(line: bytes) -> ExportTraceServiceRequest:
    """OTLP/JSON uses hex ids where protobuf's JSON mapping uses base64: convert, then parse."""
    doc = json.loads(line)
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for s in ss["spans"]:
                for k in ("traceId", "spanId", "parentSpanId"):
                    if k in s:
                        s[k] = base64.b64encode(bytes.fromhex(s[k])).decode()
                for link in s.get("links", []):
                    for k in ("traceId", "spanId"):
                        link[k] = base64.b64encode(bytes.fromhex(link[k])).decode()
    return json_format.ParseDict(doc, ExportTraceServiceRequest())


def test_json_lines_parse_into_exactly_the_model(table):
    lines = encode_json_lines(table, spans_per_line=1000).splitlines()
    assert len(lines) == -(-len(table) // 1000)
    spans = [proto_span(s) for line in lines for rs in _json_to_proto(line).resource_spans
             for ss in rs.scope_spans for s in ss.spans]
    assert _by_id(spans) == _by_id(table_spans(table))


def _tiny_table(ints: list[int]) -> SpanTable:
    n = len(ints)
    return SpanTable(
        resource={"service.name": "t"}, names=["a", "b"],
        trace_hi=np.full(n, 1, np.uint64), trace_lo=np.full(n, 2, np.uint64),
        span_id=np.arange(1, n + 1, dtype=np.uint64), parent_id=np.zeros(n, np.uint64),
        link_id=np.zeros(n, np.uint64), name=np.array([i % 2 for i in range(n)]),
        start_ns=np.full(n, 2**62, np.int64), end_ns=np.full(n, 2**62 + 5, np.int64),
        attrs=[AttrColumn("i", "int", np.array(ints, np.int64)),
               AttrColumn("d", "double", np.linspace(-1.5, 1e300, n)),
               AttrColumn("b", "bool", np.arange(n) % 3 == 0, np.arange(n) % 2 == 0),
               AttrColumn("v", "value", np.arange(n) % 2)],
        values=["x" * 300, ["p", 1, 2.5, True]], source_row=np.full(n, -1))


def test_fixed_width_varints_and_edge_values():
    ints = [0, 1, 127, 128, 16383, 16384, 2**31, 2**63 - 1, -1, -(2**63)]
    table = _tiny_table(ints)
    spans, _ = _decode([encode_request(table)])
    assert _by_id(spans) == _by_id(table_spans(table))
    assert sorted(s["attrs"]["i"] for s in spans) == sorted(ints)
    assert varint_width(np.array([127])) == 1 and varint_width(np.array([128])) == 2
    assert varint_width(np.array([-1])) == 10
    # A padded varint still means the same number.
    padded = bytes(fixed_varints(np.array([5]), 4)[0])
    assert AnyValue.FromString(b"\x18" + padded).int_value == 5


def test_any_value_forms():
    for value in ("s", True, 7, -3, 2.5, b"\x00\x01", ["a", 1], {"k": "v", "n": 2}):
        parsed = AnyValue.FromString(any_value(value))
        assert json_format.MessageToDict(parsed)  # parses, and round-trips:
    assert AnyValue.FromString(any_value(["a", 1])).array_value.values[1].int_value == 1
    assert AnyValue.FromString(any_value({"k": "v"})).kvlist_value.values[0].value.string_value == "v"


def test_delimited_framing():
    buf = io.BytesIO()
    msgs = [b"", b"x" * 300, b"abc"]
    for m in msgs:
        write_delimited(buf, m)
    assert list(read_delimited(buf.getvalue())) == msgs
    with pytest.raises(ValueError):
        list(read_delimited(buf.getvalue()[:-1]))


def test_empty_table_is_a_valid_request():
    table = _tiny_table([])
    spans, resources = _decode([encode_request(table)])
    assert spans == [] and resources[0]["service.name"].string_value == "t"
