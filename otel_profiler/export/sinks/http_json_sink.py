"""OTLP/HTTP with JSON bodies (``OTEL_EXPORTER_OTLP_PROTOCOL=http/json``).

The pipeline encodes every request as protobuf (the spool and the ``.pb`` file hold those bytes);
this sink turns each one into OTLP/JSON just before it is sent: parsed with the official
opentelemetry-proto message, rendered by protobuf's ``json_format`` (lowerCamelCase field names,
64-bit integers as decimal strings, enums as integers), then trace and span ids rewritten from
protobuf JSON's base64 to the lowercase hex the OTLP specification requires. Everything else
(TLS, gzip, retries, ``Retry-After``) is :class:`~otel_profiler.export.sinks.http_sink.HttpSink`'s.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from .http_sink import HttpSink

_ID_KEYS = frozenset(("traceId", "spanId", "parentSpanId"))


def to_otlp_json(request: bytes, signal: str) -> bytes:
    """A serialized ``Export{Trace,Metrics}ServiceRequest`` as an OTLP/JSON body."""
    from google.protobuf import json_format

    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    message: Any = ExportMetricsServiceRequest if signal == "metrics" else ExportTraceServiceRequest
    tree = json_format.MessageToDict(message.FromString(request), use_integers_for_enums=True)
    return json.dumps(_hex_ids(tree), separators=(",", ":")).encode()


def _hex_ids(node: Any) -> Any:
    """Rewrite every id field (spans, links, exemplars) from base64 to hex, in place."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _ID_KEYS and isinstance(value, str):
                node[key] = base64.b64decode(value).hex()
            elif isinstance(value, (dict, list)):
                _hex_ids(value)
    elif isinstance(node, list):
        for item in node:
            _hex_ids(item)
    return node


class HttpJsonSink(HttpSink):
    content_type = "application/json"

    def encode(self, request: bytes) -> bytes:
        return to_otlp_json(request, self.target.signal)
