"""The http/json sender's body, checked against the project's independent OTLP/JSON writer.

``sinks.http_json_sink.to_otlp_json`` re-encodes the protobuf request through the official messages
and protobuf's json_format; ``otlp.json_request`` writes OTLP/JSON straight from the span table (the
Collector file format). On the spans of a real trace both must be the same document, and the
receiver must read the body back to the spans the table defines.
"""

from __future__ import annotations

import json

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from conftest import trace
from cuda_tracer.loading import load_profile
from otel_profiler.export.otlp import encode_request, json_request
from otel_profiler.spans.options import SpanOptions
from otel_profiler.spans.build import build_spans
from otel_profiler.export.sinks.http_json_sink import to_otlp_json
from otlp_receiver import otlp_json_ids_to_base64, proto_span, table_spans


def _table():
    r = load_profile([str(trace("hta/nccl_parser_config/nccl_data.json.gz"))]).ranks[0]
    return build_spans(r.meta, r.batch, SpanOptions(budget=500))


def _by_span(request: dict) -> dict:
    spans = request["resourceSpans"][0]["scopeSpans"][0]["spans"]
    return {s["spanId"]: s for s in spans}


def test_json_body_equals_the_direct_json_writer_and_parses_back_to_the_table():
    table = _table()
    body = json.loads(to_otlp_json(encode_request(table), "traces"))
    direct = json.loads(json.dumps(json_request(table)))
    assert body["resourceSpans"][0]["resource"] == direct["resourceSpans"][0]["resource"]
    got, want = _by_span(body), _by_span(direct)
    assert len(got) == len(table) > 100 and got.keys() == want.keys()
    for span_id, span in want.items():
        other = got[span_id]
        assert {k: v for k, v in other.items() if k != "attributes"} == \
            {k: v for k, v in span.items() if k != "attributes"}
        assert sorted(other["attributes"], key=lambda a: a["key"]) == \
            sorted(span["attributes"], key=lambda a: a["key"])
    message = json_format.ParseDict(otlp_json_ids_to_base64(body), ExportTraceServiceRequest())
    received = sorted((proto_span(s) for s in message.resource_spans[0].scope_spans[0].spans),
                      key=lambda s: s["span"])
    assert received == sorted(table_spans(table), key=lambda s: s["span"])
