"""OTLP/gRPC sink: sends pre-encoded ``ExportTraceServiceRequest`` or ``ExportMetricsServiceRequest``
bytes on the official service path of the target's signal.

The request is already serialized (``otel_profiler.export.otlp``, ``otel_profiler.export.metrics_otlp``),
so the call passes bytes straight through (no request serializer) and parses only the small response
for ``partial_success``.
"""

from __future__ import annotations

import importlib
import logging

import grpc

from ...shared.otlp_target import OtlpTarget, safe_text
from . import OK, Result

log = logging.getLogger(__name__)

# Per signal: the service method, its response message (module, name) and the response's "rejected"
# count field. A response with no partial success is empty: the message's module (its protobuf
# definitions, about 18 ms to import) is imported only to read one that is not.
EXPORT: dict[str, tuple[str, str, str, str]] = {
    "traces": ("/opentelemetry.proto.collector.trace.v1.TraceService/Export",
               "opentelemetry.proto.collector.trace.v1.trace_service_pb2", "ExportTraceServiceResponse",
               "rejected_spans"),
    "metrics": ("/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
                "opentelemetry.proto.collector.metrics.v1.metrics_service_pb2", "ExportMetricsServiceResponse",
                "rejected_data_points"),
    "profiles": ("/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export",
                 "opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2",
                 "ExportProfilesServiceResponse", "rejected_profiles"),
}
_RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
              grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.ABORTED, grpc.StatusCode.CANCELLED,
              grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.DATA_LOSS}
_KEEP = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN, grpc.StatusCode.UNIMPLEMENTED}
_MAX_MESSAGE = 64 * 1024 * 1024


def _read(path: str) -> bytes | None:
    if not path:
        return None
    with open(path, "rb") as f:
        return f.read()


def channel_for(target: OtlpTarget) -> grpc.Channel:
    endpoint = target.endpoint
    if "://" in endpoint:
        scheme, _, rest = endpoint.partition("://")
        address, tls = rest.split("/", 1)[0], scheme.lower() == "https"
    else:
        address, tls = endpoint, not target.insecure
    options = [("grpc.max_send_message_length", _MAX_MESSAGE),
               ("grpc.max_receive_message_length", _MAX_MESSAGE)]
    compression = grpc.Compression.Gzip if target.compression == "gzip" else grpc.Compression.NoCompression
    if not tls:
        return grpc.insecure_channel(address, options=options, compression=compression)
    creds = grpc.ssl_channel_credentials(root_certificates=_read(target.certificate),
                                         private_key=_read(target.client_key),
                                         certificate_chain=_read(target.client_certificate))
    return grpc.secure_channel(address, creds, options=options, compression=compression)


class GrpcSink:
    def __init__(self, target: OtlpTarget) -> None:
        self.target = target
        self._channel = channel_for(target)
        method, self._response_module, self._response_name, self._rejected_field = EXPORT[target.signal]
        self._export = self._channel.unary_unary(method)
        self._metadata = tuple((k.lower(), v) for k, v in target.headers.items())

    def send(self, request: bytes, timeout_s: float | None = None) -> Result:
        timeout = self.target.timeout_s if timeout_s is None else min(timeout_s, self.target.timeout_s)
        try:
            raw = self._export(request, timeout=timeout, metadata=self._metadata)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            details = (exc.details() if hasattr(exc, "details") else "") or ""
            name = code.name if code is not None else "UNKNOWN"
            # The details of a status the server set may echo what it received: only the code is
            # shown then. Connection failures are the client library's own words.
            said = f": {safe_text(details)}" if code == grpc.StatusCode.UNAVAILABLE and \
                details.startswith("failed to connect") else ""
            return Result(False, code in _RETRYABLE, f"gRPC {name}{said}", keep=code in _KEEP)
        except ValueError:
            # grpc validates metadata locally; its message would echo the header value.
            return Result(False, False, "invalid OTLP header (value hidden)")
        rejected = self._rejected(raw) if raw else 0
        if not rejected:
            return OK
        items = self._rejected_field.removeprefix("rejected_").replace("_", " ")  # spans, data points
        return Result(True, rejected=rejected, message=f"receiver rejected {rejected} {items}")

    def _rejected(self, raw: bytes) -> int:
        """The count of items the response says the receiver rejected (0 where it cannot be read)."""
        try:
            message = getattr(importlib.import_module(self._response_module), self._response_name)
            return int(getattr(message.FromString(raw).partial_success, self._rejected_field))
        except Exception:
            log.debug("the receiver's gRPC response could not be read", exc_info=True)
            return 0

    def close(self) -> None:
        self._channel.close()
