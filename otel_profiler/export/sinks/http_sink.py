"""OTLP/HTTP (protobuf) sink on the standard library's ``http.client``: POST to ``/v1/traces`` or
``/v1/metrics``.

TLS uses ``OTEL_EXPORTER_OTLP_CERTIFICATE`` (trusted CAs) and the client key/certificate pair for
mutual TLS; gzip when compression is ``gzip``. 429/502/503/504 and connection failures are
retryable (``Retry-After`` honoured), other 5xx are kept for replay, other statuses are final.
The response body is read (to keep the connection usable) but never shown, nor the server's status
text: a failure is the status code and its standard phrase.
"""

from __future__ import annotations

import gzip
import http.client
from http import HTTPStatus
import ssl
from urllib.parse import urlsplit

from ...shared.otlp_target import OtlpTarget, safe_text
from . import OK, Result

_RETRYABLE_STATUS = {429, 502, 503, 504}


class HttpSink:
    content_type = "application/x-protobuf"  # http/json: the subclass in http_json_sink

    def encode(self, request: bytes) -> bytes:
        """The body for one protobuf-encoded request (http/json re-encodes it)."""
        return request

    def __init__(self, target: OtlpTarget) -> None:
        self.target = target
        url = urlsplit(target.endpoint if "://" in target.endpoint else "http://" + target.endpoint)
        self._https = url.scheme == "https"
        self._host, self._port = url.hostname or "localhost", url.port
        self._path = (url.path or f"/v1/{target.signal}") + (f"?{url.query}" if url.query else "")
        self._context = None
        if self._https:
            ctx = ssl.create_default_context(cafile=target.certificate or None)
            if target.client_certificate:
                ctx.load_cert_chain(target.client_certificate, target.client_key or None)
            self._context = ctx
        self._conn: http.client.HTTPConnection | None = None

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            if self._https:
                self._conn = http.client.HTTPSConnection(self._host, self._port, timeout=self.target.timeout_s,
                                                         context=self._context)
            else:
                self._conn = http.client.HTTPConnection(self._host, self._port, timeout=self.target.timeout_s)
        return self._conn

    def send(self, request: bytes, timeout_s: float | None = None) -> Result:
        headers = {"Content-Type": self.content_type}
        headers.update(self.target.headers)
        body = self.encode(request)
        if self.target.compression == "gzip":
            body = gzip.compress(body, compresslevel=1)
            headers["Content-Encoding"] = "gzip"
        try:
            conn = self._connection()
            conn.timeout = self.target.timeout_s if timeout_s is None else min(timeout_s, self.target.timeout_s)
            if conn.sock is not None:
                conn.sock.settimeout(conn.timeout)
            conn.request("POST", self._path, body=body, headers=headers)
            resp = conn.getresponse()
            payload = resp.read()
        except ssl.SSLError as exc:
            self.close()
            return Result(False, False, f"TLS error: {exc.__class__.__name__}: {safe_text(exc.reason or exc)}")
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            return Result(False, True, f"connection failed: {exc.__class__.__name__}: {safe_text(exc)}")
        except ValueError:
            # http.client rejects bad header values with a message that echoes them.
            self.close()
            return Result(False, False, "invalid OTLP header (value hidden)")
        if 200 <= resp.status < 300:
            return OK
        retry_after = None
        if resp.status in _RETRYABLE_STATUS:
            try:
                retry_after = float(resp.getheader("Retry-After") or "")
            except ValueError:
                pass
        # A receiver's body and status text may echo headers or carry escape sequences: neither is
        # shown, only the status code and its standard phrase.
        del payload
        try:
            phrase = HTTPStatus(resp.status).phrase
        except ValueError:
            phrase = ""
        return Result(False, resp.status in _RETRYABLE_STATUS, f"HTTP {resp.status} {phrase}".rstrip(),
                      retry_after, keep=resp.status >= 500)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
