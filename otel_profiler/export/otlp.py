"""SpanTable → OTLP ``ExportTraceServiceRequest`` bytes (protobuf) and OTLP JSON, vectorized.

No span object per event and no protobuf library: the wire format is written with numpy.

How (protobuf): spans are grouped by *layout* (name, which attributes are present, the values of
string-like attributes, parent/link presence). Within a group every span has the same byte length
because integer attributes are written as *fixed-width varints* (the widest the group needs; a
non-minimal varint is valid wire format and parses back exactly), ids and times are fixed-size
(``bytes`` ids, ``fixed64`` times). So a group is a 2-D ``uint8`` array: a constant template plus a
few column writes. Groups are concatenated and cut into requests of at most ``max_request_bytes``
(the gRPC default receive limit of Collectors and Jaeger is 4 MiB).

OTLP JSON follows the OTLP/JSON rules (lowerCamelCase keys, hex trace/span ids, 64-bit integers as
decimal strings, enums as integers), one request per line as the Collector's file exporter writes.
"""

from __future__ import annotations

import struct
from typing import Any, Callable, Iterator

import numpy as np

from ..spans.table import SPAN_KIND_INTERNAL, SpanTable
from ..shared.ids import mix64

DEFAULT_MAX_REQUEST_BYTES = 3 * 1024 * 1024

# ------------------------------------------------------------------------- protobuf primitives
_POW7 = np.array([1 << (7 * k) for k in range(1, 10)], np.uint64)
_SHIFTS = np.arange(0, 70, 7, dtype=np.uint64)  # the ten seven-bit groups of a 64-bit varint


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _len_field(tag: int, payload: bytes) -> bytes:
    return bytes([tag]) + varint(len(payload)) + payload


def varint_width(values: np.ndarray) -> int:
    """Bytes the widest varint of ``values`` (int64, two's complement) needs."""
    if not len(values):
        return 1
    u = values.astype(np.uint64)
    return 1 + int((u.max() >= _POW7).sum()) if (values >= 0).all() else 10


def fixed_varints(values: np.ndarray, width: int) -> np.ndarray:
    """``(n, width)`` uint8: each value as a varint padded to ``width`` bytes with continuation bits."""
    out = ((values.astype(np.uint64)[:, None] >> _SHIFTS[:width]) & np.uint64(0x7F)).astype(np.uint8)
    out[:, :-1] |= np.uint8(0x80)
    return out


def any_value(value: Any) -> bytes:
    """Protobuf ``AnyValue`` of a Python value (str, bool, int, float, bytes, list, dict)."""
    if isinstance(value, bool):
        return b"\x10" + (b"\x01" if value else b"\x00")
    if isinstance(value, int):
        return b"\x18" + varint(value)
    if isinstance(value, float):
        return b"\x21" + struct.pack("<d", value)
    if isinstance(value, str):
        return _len_field(0x0A, value.encode("utf-8", "replace"))
    if isinstance(value, bytes):
        return _len_field(0x3A, value)
    if isinstance(value, (list, tuple)):
        return _len_field(0x2A, b"".join(_len_field(0x0A, any_value(v)) for v in value))
    if isinstance(value, dict):
        return _len_field(0x32, b"".join(_len_field(0x0A, key_value(k, v)) for k, v in value.items()))
    return any_value(str(value))


def key_value(key: str, value: Any) -> bytes:
    return _len_field(0x0A, key.encode()) + _len_field(0x12, any_value(value))


# ------------------------------------------------------------------------- span records
class _Layout:
    """The byte layout of one group: constant template plus (offset, column bytes) writes."""

    def __init__(self) -> None:
        self.parts: list[bytes | tuple[int, np.ndarray]] = []
        self.size = 0

    def const(self, data: bytes) -> None:
        self.parts.append(data)
        self.size += len(data)

    def column(self, data: np.ndarray) -> None:
        self.parts.append((self.size, data))
        self.size += data.shape[1]

    def render(self, n: int, prefix: bytes) -> np.ndarray:
        width = len(prefix) + self.size
        template = np.zeros(width, np.uint8)
        template[:len(prefix)] = np.frombuffer(prefix, np.uint8)
        pos = len(prefix)
        writes = []
        for p in self.parts:
            if isinstance(p, bytes):
                template[pos:pos + len(p)] = np.frombuffer(p, np.uint8)
                pos += len(p)
            else:
                writes.append((len(prefix) + p[0], p[1]))
                pos += p[1].shape[1]
        out = np.empty((n, width), np.uint8)
        out[:] = template
        for off, data in writes:
            out[:, off:off + data.shape[1]] = data
        return out


def _be_bytes(values: np.ndarray) -> np.ndarray:
    return values.astype(">u8").view(np.uint8).reshape(-1, 8)


def _le_bytes(values: np.ndarray) -> np.ndarray:
    return values.astype("<u8").view(np.uint8).reshape(-1, 8)


def _group_keys(table: SpanTable) -> np.ndarray:
    """A layout key per span (64-bit hash of name, presence bits, value ids, parent, link)."""
    n = len(table)
    key = mix64(table.name.astype(np.uint64))
    bits = (table.parent_id != 0).astype(np.uint64) | ((table.link_id != 0).astype(np.uint64) << np.uint64(1))
    for i, a in enumerate(table.attrs):
        if a.present is not None:
            bits |= a.present.astype(np.uint64) << np.uint64(2 + i)
    with np.errstate(over="ignore"):
        key = mix64(key ^ mix64(bits + np.uint64(0x51ED2701)))
        for i, link in enumerate(table.extra_links):
            key = mix64(key ^ ((link.span_id != 0).astype(np.uint64) << np.uint64(i + 1)))
        for row, state in table.trace_states.items():
            key[row] = mix64(key[row:row + 1] ^ np.uint64(hash(state) & 0xFFFFFFFFFFFF))[0]
        for i, a in enumerate(table.attrs):
            if a.type == "value":
                key = mix64(key ^ (a.values.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
                                       + np.uint64(i)))
    return key if n else np.zeros(0, np.uint64)


# The ids (big-endian: trace ids 16 bytes, span ids 8) and times (fixed64) of a table as bytes.
_BYTE_COLUMNS: dict[str, Callable[[SpanTable], np.ndarray]] = {
    "trace": lambda t: np.hstack([_be_bytes(t.trace_hi), _be_bytes(t.trace_lo)]),
    "span": lambda t: _be_bytes(t.span_id),
    "parent": lambda t: _be_bytes(t.parent_id),
    "link": lambda t: _be_bytes(t.link_id),
    "start": lambda t: _le_bytes(t.start_ns),
    "end": lambda t: _le_bytes(t.end_ns),
}


class SpanEncoder:
    """Encodes one SpanTable; pre-encodes names, keys and values once, and the byte columns of the
    ids and times once for the whole table (each group takes its rows)."""

    def __init__(self, table: SpanTable) -> None:
        self.t = table
        self._name_bytes: dict[int, bytes] = {}
        self._value_bytes: dict[int, bytes] = {}
        self._key_bytes = [_len_field(0x0A, a.key.encode()) for a in table.attrs]
        self._columns: dict[str, np.ndarray] = {}

    def _name(self, i: int) -> bytes:
        b = self._name_bytes.get(i)
        if b is None:
            b = self._name_bytes[i] = _len_field(0x2A, self.t.names[i].encode("utf-8", "replace"))
        return b

    def _value(self, i: int) -> bytes:
        b = self._value_bytes.get(i)
        if b is None:
            b = self._value_bytes[i] = _len_field(0x12, any_value(self.t.values[i]))
        return b

    def _column(self, name: str) -> np.ndarray:
        """One of ``_BYTE_COLUMNS`` for the whole table, made on first use."""
        column = self._columns.get(name)
        if column is None:
            column = self._columns[name] = _BYTE_COLUMNS[name](self.t)
        return column

    def _layout_fields(self, rows: np.ndarray) -> list[np.ndarray]:
        """What decides a span's layout, per field, for ``rows``: spans of one group must agree on
        all of them (``_group_keys`` hashes them; a collision must not mix two layouts)."""
        t = self.t
        fields = [t.name[rows], t.parent_id[rows] != 0, t.link_id[rows] != 0]
        for a in t.attrs:
            if a.present is not None:
                fields.append(a.present[rows])
            if a.type == "value":
                fields.append(a.values[rows])
        fields += [link.span_id[rows] != 0 for link in t.extra_links]
        if t.trace_states:
            states = {state: k for k, state in enumerate(dict.fromkeys(t.trace_states.values()), 1)}
            fields.append(np.array([states.get(t.trace_states.get(r, ""), 0) for r in rows.tolist()]))
        return fields

    def records(self) -> Iterator[np.ndarray]:
        """Per layout group: an ``(n, record_len)`` uint8 array of ``ScopeSpans.spans`` fields."""
        t = self.t
        if not len(t):
            return
        keys = _group_keys(t)
        order = np.argsort(keys, kind="stable")
        sk = keys[order]
        bounds = np.flatnonzero(sk[1:] != sk[:-1]) + 1
        starts = np.concatenate(([0], bounds))
        first = order[np.repeat(starts, np.diff(np.append(starts, len(order))))]  # its group's first row
        differs = np.zeros(len(order), bool)
        for of_rows, of_first in zip(self._layout_fields(order), self._layout_fields(first)):
            differs |= of_rows != of_first
        mixed = np.logical_or.reduceat(differs, starts)  # groups whose keys collided
        for rows, collided in zip(np.split(order, bounds), mixed.tolist()):
            if collided:
                yield from self._split(rows)
            else:
                yield self._group(rows)

    def _split(self, rows: np.ndarray) -> Iterator[np.ndarray]:
        """Rows whose layout keys collided: the first one's layout, then the others'."""
        same = np.ones(len(rows), bool)
        for field in self._layout_fields(rows):
            same &= field == field[0]
        if not same.all():
            yield from self._split(rows[~same])
            rows = rows[same]
        yield self._group(rows)

    def _group(self, rows: np.ndarray) -> np.ndarray:
        t = self.t
        first = rows[0]
        state = t.trace_states.get(int(first), "")
        n = len(rows)
        lay = _Layout()
        trace = self._column("trace")[rows]
        lay.const(b"\x0a\x10")
        lay.column(trace)
        lay.const(b"\x12\x08")
        lay.column(self._column("span")[rows])
        if state:
            lay.const(_len_field(0x1A, state.encode("ascii", "replace")))
        if t.parent_id[first]:
            lay.const(b"\x22\x08")
            lay.column(self._column("parent")[rows])
        lay.const(self._name(int(t.name[first])))
        lay.const(bytes([0x30, SPAN_KIND_INTERNAL]))
        lay.const(b"\x39")
        lay.column(self._column("start")[rows])
        lay.const(b"\x41")
        lay.column(self._column("end")[rows])
        for i, (key, a) in enumerate(zip(self._key_bytes, t.attrs)):
            if a.present is not None and not a.present[first]:
                continue
            self._attr(lay, key, i, rows)
        if t.link_id[first]:
            lay.const(b"\x6a\x1c\x0a\x10")
            lay.column(trace)
            lay.const(b"\x12\x08")
            lay.column(self._column("link")[rows])
        for link in t.extra_links:  # links to other traces: the run span, the user's span
            if link.span_id[first]:
                lay.const(b"\x6a\x1c\x0a\x10")
                lay.column(np.hstack([_be_bytes(link.trace_hi[rows]), _be_bytes(link.trace_lo[rows])]))
                lay.const(b"\x12\x08")
                lay.column(_be_bytes(link.span_id[rows]))
        return lay.render(n, b"\x12" + varint(lay.size))

    def _attr(self, lay: _Layout, key: bytes, i: int, rows: np.ndarray) -> None:
        a = self.t.attrs[i]
        if a.type == "value":
            body = key + self._value(int(a.values[rows[0]]))
            lay.const(b"\x4a" + varint(len(body)) + body)
            return
        if a.type == "int":
            v = a.values[rows]
            w = varint_width(v)
            anyv_len = 1 + w
            lay.const(b"\x4a" + varint(len(key) + 2 + anyv_len) + key + bytes([0x12, anyv_len, 0x18]))
            lay.column(fixed_varints(v, w))
        elif a.type == "double":
            lay.const(b"\x4a" + varint(len(key) + 2 + 9) + key + b"\x12\x09\x21")
            lay.column(a.values[rows].astype("<f8").view(np.uint8).reshape(-1, 8))
        else:  # bool
            lay.const(b"\x4a" + varint(len(key) + 4) + key + b"\x12\x02\x10")
            lay.column(a.values[rows].astype(np.uint8).reshape(-1, 1))


def _resource_bytes(table: SpanTable) -> bytes:
    return b"".join(_len_field(0x0A, key_value(k, v)) for k, v in table.resource.items())


def _scope_bytes(table: SpanTable) -> bytes:
    scope = _len_field(0x0A, table.scope_name.encode())
    if table.scope_version:
        scope += _len_field(0x12, table.scope_version.encode())
    return scope


def split_requests(table: SpanTable,
                   max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> list[tuple[bytes, int]]:
    """The table as serialized ``ExportTraceServiceRequest`` messages with their span counts, each
    message at most about ``max_request_bytes`` (a single span is never split)."""
    resource = _len_field(0x0A, _resource_bytes(table))
    scope = _len_field(0x0A, _scope_bytes(table))
    chunks: list[tuple[list[bytes], int]] = []
    parts: list[bytes] = []
    size = count = 0
    for rec in SpanEncoder(table).records():
        width = rec.shape[1]
        lo = 0
        while lo < len(rec):
            room = max(1, (max_request_bytes - size) // width)
            hi = min(len(rec), lo + room)
            parts.append(rec[lo:hi].tobytes())
            size += (hi - lo) * width
            count += hi - lo
            lo = hi
            if size + width > max_request_bytes:
                chunks.append((parts, count))
                parts, size, count = [], 0, 0
    if parts or not chunks:
        chunks.append((parts, count))
    return [(_len_field(0x0A, resource + _len_field(0x12, scope + b"".join(p))), n) for p, n in chunks]


def encode_requests(table: SpanTable, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> list[bytes]:
    """``split_requests`` without the counts."""
    return [request for request, _ in split_requests(table, max_request_bytes)]


def encode_request(table: SpanTable) -> bytes:
    """The whole table as one ``ExportTraceServiceRequest`` (no size limit)."""
    return encode_requests(table, max_request_bytes=1 << 62)[0]


# ------------------------------------------------------------------------- OTLP JSON
def json_any_value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, (list, tuple)):
        return {"arrayValue": {"values": [json_any_value(v) for v in value]}}
    if isinstance(value, dict):
        return {"kvlistValue": {"values": [{"key": k, "value": json_any_value(v)} for k, v in value.items()]}}
    return {"stringValue": str(value)}


def _hex_ids(values: np.ndarray) -> list[str]:
    return [f"{v:016x}" for v in values.tolist()]


def json_spans(table: SpanTable) -> list[dict[str, Any]]:
    """The spans of ``table`` as OTLP/JSON dicts (one per span)."""
    t = table
    n = len(t)
    trace = [h + lo for h, lo in zip(_hex_ids(t.trace_hi), _hex_ids(t.trace_lo))]
    span = _hex_ids(t.span_id)
    parent = _hex_ids(t.parent_id)
    link = _hex_ids(t.link_id)
    starts, ends = t.start_ns.astype(str).tolist(), t.end_ns.astype(str).tolist()
    names = [t.names[i] for i in t.name.tolist()]
    attrs: list[list[dict[str, Any]]] = [[] for _ in range(n)]
    values = [json_any_value(v) for v in t.values]
    for a in t.attrs:
        rows = np.arange(n) if a.present is None else np.flatnonzero(a.present)
        vals = a.values[rows]
        if a.type == "int":
            encoded = [{"intValue": str(v)} for v in vals.tolist()]
        elif a.type == "double":
            encoded = [{"doubleValue": v} for v in vals.tolist()]
        elif a.type == "bool":
            encoded = [{"boolValue": v} for v in vals.tolist()]
        else:
            encoded = [values[v] for v in vals.tolist()]
        key = a.key
        for r, v in zip(rows.tolist(), encoded):
            attrs[r].append({"key": key, "value": v})
    has_parent = (t.parent_id != 0).tolist()
    has_link = (t.link_id != 0).tolist()
    others = [(_hex_ids(c.trace_hi), _hex_ids(c.trace_lo), _hex_ids(c.span_id), (c.span_id != 0).tolist())
              for c in t.extra_links]
    out = []
    for i in range(n):
        s: dict[str, Any] = {"traceId": trace[i], "spanId": span[i]}
        if i in t.trace_states:
            s["traceState"] = t.trace_states[i]
        if has_parent[i]:
            s["parentSpanId"] = parent[i]
        s.update(name=names[i], kind=SPAN_KIND_INTERNAL, startTimeUnixNano=starts[i],
                 endTimeUnixNano=ends[i], attributes=attrs[i])
        links = [{"traceId": trace[i], "spanId": link[i]}] if has_link[i] else []
        links += [{"traceId": hi[i] + lo[i], "spanId": sid[i]} for hi, lo, sid, has in others if has[i]]
        if links:
            s["links"] = links
        out.append(s)
    return out


def json_request(table: SpanTable, spans: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One OTLP/JSON ``ExportTraceServiceRequest`` object (``spans``: a slice of ``json_spans``)."""
    scope: dict[str, Any] = {"name": table.scope_name}
    if table.scope_version:
        scope["version"] = table.scope_version
    return {"resourceSpans": [{
        "resource": {"attributes": [{"key": k, "value": json_any_value(v)} for k, v in table.resource.items()]},
        "scopeSpans": [{"scope": scope, "spans": json_spans(table) if spans is None else spans}],
    }]}


def encode_json_lines(table: SpanTable, spans_per_line: int = 10_000) -> bytes:
    """OTLP/JSON lines as the Collector's file exporter writes them (one request per line)."""
    import msgspec

    spans = json_spans(table)
    enc = msgspec.json.Encoder()
    lines = [_json_line(enc, json_request(table, spans[i:i + spans_per_line]))
             for i in range(0, max(len(spans), 1), spans_per_line)]
    return b"\n".join(lines) + b"\n"


def _json_line(enc: Any, request: dict[str, Any]) -> bytes:
    """One request as JSON. Text with lone surrogates (the undecodable bytes of a file name, as
    Python reads them) has no UTF-8 form: such a line is written with each of them as its JSON
    escape (``\\udcff``), so the file stays UTF-8 and nothing is lost (a reader decoding with
    ``surrogateescape`` gets the name's bytes back)."""
    try:
        return enc.encode(request)
    except UnicodeEncodeError:
        import json

        text = json.dumps(request, ensure_ascii=False, separators=(",", ":"))
        return text.encode("utf-8", "backslashreplace")  # only lone surrogates fail: \udcXX


# ------------------------------------------------------------------------- framing
def write_delimited(f: Any, message: bytes) -> int:
    """Append one length-delimited message (varint length + bytes), as ``.pb`` files and spools hold."""
    head = varint(len(message))
    f.write(head)
    f.write(message)
    return len(head) + len(message)


def read_delimited(data: bytes) -> Iterator[bytes]:
    """The messages of a length-delimited stream; raises ValueError on a truncated one."""
    pos, n = 0, len(data)
    while pos < n:
        length = shift = 0
        while True:
            if pos >= n:
                raise ValueError("truncated length prefix")
            b = data[pos]
            pos += 1
            length |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        if pos + length > n:
            raise ValueError("truncated message")
        yield data[pos:pos + length]
        pos += length
