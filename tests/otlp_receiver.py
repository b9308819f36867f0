"""A real OTLP receiver for tests: gRPC and HTTP servers on the official opentelemetry-proto
service definitions, collecting every ``ExportTraceServiceRequest`` and ``ExportMetricsServiceRequest``
they accept.

``required_headers`` makes them refuse requests without those headers (UNAUTHENTICATED / 401);
``delay_s`` makes every export slow. HTTP takes protobuf and OTLP/JSON bodies (``Content-Type:
application/json``): JSON is read with protobuf's ``json_format`` into the same official messages,
after checking that every trace/span id is lowercase hex of the right length, as OTLP/JSON requires
(a body that breaks the rules gets 400).
"""

from __future__ import annotations

import base64
import gzip
import json
import re
import threading
import time
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
from google.protobuf import json_format
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTracePartialSuccess,
    ExportTraceServiceResponse,
)
from ports import free_port  # noqa: F401  (also for the modules importing it from here)


class Collected:
    """What a receiver got: requests, and every span flattened with its resource."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.metric_requests: list[ExportMetricsServiceRequest] = []
        self.headers: list[dict[str, str]] = []
        self.content_types: list[str] = []  # of every HTTP request accepted
        self._lock = threading.Lock()

    def add(self, request: ExportTraceServiceRequest, headers: dict[str, str]) -> None:
        with self._lock:
            self.requests.append(request)
            self.headers.append(headers)

    def add_metrics(self, request: ExportMetricsServiceRequest) -> None:
        with self._lock:
            self.metric_requests.append(request)

    def metrics(self) -> dict[str, list]:
        """Metric name -> every received ``Metric`` message of that name, in arrival order."""
        out: dict[str, list] = {}
        with self._lock:
            for req in self.metric_requests:
                for rm in req.resource_metrics:
                    for sm in rm.scope_metrics:
                        for metric in sm.metrics:
                            out.setdefault(metric.name, []).append(metric)
        return out

    def spans(self) -> list[tuple[dict, object]]:
        """``(resource attributes as dict, Span)`` for every received span."""
        out = []
        with self._lock:
            for req in self.requests:
                for rs in req.resource_spans:
                    res = {kv.key: kv.value for kv in rs.resource.attributes}
                    for ss in rs.scope_spans:
                        out.extend((res, s) for s in ss.spans)
        return out


class _Servicer(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, receiver: "OtlpReceiver") -> None:
        self.r = receiver

    def Export(self, request, context):  # noqa: N802 (the proto's name)
        headers = {k: v for k, v in context.invocation_metadata()}
        if not self.r.authorized(headers):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong credentials")
        time.sleep(self.r.delay_s)
        self.r.collected.add(request, headers)
        if self.r.reject_spans:  # a partial success: the receiver says it dropped some
            return ExportTraceServiceResponse(partial_success=ExportTracePartialSuccess(
                rejected_spans=self.r.reject_spans, error_message="over this receiver's quota"))
        return ExportTraceServiceResponse()


class _MetricsServicer(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self, receiver: "OtlpReceiver") -> None:
        self.r = receiver

    def Export(self, request, context):  # noqa: N802 (the proto's name)
        if not self.r.authorized({k: v for k, v in context.invocation_metadata()}):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong credentials")
        self.r.collected.add_metrics(request)
        return ExportMetricsServiceResponse()


class OtlpReceiver:
    """``start()`` opens a gRPC server and an HTTP server on free localhost ports."""

    def __init__(self, required_headers: dict[str, str] | None = None, delay_s: float = 0.0,
                 grpc_port: int = 0, reject_spans: int = 0) -> None:
        self.grpc_port = grpc_port
        self.reject_spans = reject_spans  # gRPC: each trace request answered with this many rejected
        self.required_headers = {k.lower(): v for k, v in (required_headers or {}).items()}
        self.delay_s = delay_s
        self.collected = Collected()
        self._grpc = None
        self._http = None

    def authorized(self, headers: dict[str, str]) -> bool:
        lower = {k.lower(): v for k, v in headers.items()}
        return all(lower.get(k) == v for k, v in self.required_headers.items())

    def start(self) -> "OtlpReceiver":
        self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=4),
                                 options=[("grpc.max_receive_message_length", 64 << 20)])
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Servicer(self), self._grpc)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(_MetricsServicer(self), self._grpc)
        self.grpc_port = self._grpc.add_insecure_port(f"127.0.0.1:{self.grpc_port}")
        self._grpc.start()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                headers = {k.lower(): v for k, v in self.headers.items()}
                if self.path not in ("/v1/traces", "/v1/metrics"):
                    return self._reply(404, b"not found")
                if not receiver.authorized(headers):
                    return self._reply(401, b"unauthorized")
                metrics = self.path == "/v1/metrics"
                message = ExportMetricsServiceRequest() if metrics else ExportTraceServiceRequest()
                content_type = headers.get("content-type", "")
                try:
                    if content_type == "application/json":
                        json_format.ParseDict(otlp_json_ids_to_base64(json.loads(body)), message)
                    else:
                        message.ParseFromString(body)
                except Exception as exc:
                    return self._reply(400, f"bad request: {exc}"[:300].encode())
                receiver.collected.content_types.append(content_type)
                if metrics:
                    receiver.collected.add_metrics(message)
                    return self._reply(200, ExportMetricsServiceResponse().SerializeToString())
                time.sleep(receiver.delay_s)
                receiver.collected.add(message, headers)
                self._reply(200, ExportTraceServiceResponse().SerializeToString())

            def _reply(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):  # quiet
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http_port = self._http.server_address[1]
        threading.Thread(target=self._http.serve_forever, daemon=True).start()
        return self

    @property
    def grpc_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.grpc_port}"

    @property
    def http_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def stop(self) -> None:
        if self._grpc is not None:
            self._grpc.stop(0)
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()

    def __enter__(self) -> "OtlpReceiver":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


_ID_LENGTH = {"traceId": 32, "spanId": 16, "parentSpanId": 16}


def otlp_json_ids_to_base64(node):
    """OTLP/JSON carries ids as hex; protobuf's JSON mapping wants base64. Raises ValueError on an id
    that is not lowercase hex of its length (an empty parent id is allowed)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _ID_LENGTH and isinstance(value, str):
                if value and not re.fullmatch(f"[0-9a-f]{{{_ID_LENGTH[key]}}}", value):
                    raise ValueError(f"{key} {value!r} is not {_ID_LENGTH[key]} lowercase hex digits")
                node[key] = base64.b64encode(bytes.fromhex(value)).decode()
            else:
                otlp_json_ids_to_base64(value)
    elif isinstance(node, list):
        for item in node:
            otlp_json_ids_to_base64(item)
    return node


# ------------------------------------------------------------------------- comparing spans
def _any(value) -> object:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_any(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _any(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, which) if which else None


def proto_span(span) -> dict:
    """A received protobuf Span as a plain dict (ids as hex)."""
    return {
        "trace": span.trace_id.hex(), "span": span.span_id.hex(), "parent": span.parent_span_id.hex(),
        "name": span.name, "kind": span.kind, "start": span.start_time_unix_nano,
        "end": span.end_time_unix_nano, "attrs": {kv.key: _any(kv.value) for kv in span.attributes},
        "links": [(link.trace_id.hex(), link.span_id.hex()) for link in span.links],
    }


def table_spans(table) -> list[dict]:
    """The spans a SpanTable defines, in the same dict form as ``proto_span``."""
    import numpy as np

    out = []
    for i in range(len(table)):
        trace = table.trace_hex(i)
        attrs = {}
        for a in table.attrs:
            if a.present is not None and not a.present[i]:
                continue
            v = a.values[i]
            attrs[a.key] = {"int": int, "double": float, "bool": bool}.get(a.type, lambda x: table.values[int(x)])(v)
        out.append({
            "trace": trace, "span": f"{int(table.span_id[i]):016x}",
            "parent": f"{int(table.parent_id[i]):016x}" if table.parent_id[i] else "",
            "name": table.names[int(table.name[i])], "kind": 1, "start": int(table.start_ns[i]),
            "end": int(table.end_ns[i]), "attrs": attrs,
            "links": [(trace, f"{int(table.link_id[i]):016x}")] if table.link_id[i] != np.uint64(0) else [],
        })
    return out
