"""Reads a trace's JSON text as a stream: the ``traceEvents`` array is cut at event boundaries into
pieces of about ``PIECE_BYTES``, each decoded (and handed on) while the next is still compressed.

- The document's head, up to and including the ``[`` of ``traceEvents`` (or the ``[`` of a bare
  event list), is kept aside; every other field of the file is in the head or after the array.
- A piece ends before a ``,`` that stands between ``}`` and ``{``. Such a comma could also sit
  inside a string or a nested value; then the piece does not decode, and an earlier boundary is
  taken (a piece that decodes is a list of whole events: a cut inside a string or a nested value
  always leaves one unclosed).
- The rest, once the text has ended, is one more piece, up to the array's closing ``]`` where that
  is found (a ``]`` after a ``}`` near the end, after which the text read with the head is a
  document with no events; the piece must then decode too), else but for its last event. The
  fields after the array (and that last event) are decoded with the head as one small document:
  the file's own fields.

A text in which the head is not found (no ``traceEvents`` array near the start) is decoded whole,
as are texts smaller than one piece.
"""

from __future__ import annotations

import re
from itertools import chain
from typing import Any, Callable, Iterable

import msgspec

from cuda_tracer.profile import TraceError
from cuda_tracer.trace_json.scan import scan_piece
from cuda_tracer.trace_json.schema import LOOSE_DECODER, LOOSE_EVENTS, TAGGED_DECODER, TAGGED_EVENTS, TraceFile

PIECE_BYTES = 8 << 20
TAIL_BYTES = 64 << 10  # a smaller rest of the event list is decoded with the file's own fields
HEAD_LIMIT = 64 << 20  # where the event array must have begun for the text to be streamed
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_WHITESPACE = b" \t\r\n"
_FIRST_NON_WHITESPACE = re.compile(rb"[^ \t\r\n]")
_ANY = msgspec.json.Decoder()
_JSON_LIST = msgspec.json.Decoder(list[msgspec.Raw])  # checks a piece is a list, decodes nothing
_ATTEMPTS = 32  # boundaries tried per piece (each a decode): bounds the work on adversarial text
_ERROR_BYTE = re.compile(r"\(byte (\d+)\)")


def read_stream(path: str, chunks: Iterable[bytes], on_events: Callable[[Any], None],
                piece_bytes: int = PIECE_BYTES, decode: bool = True,
                first_piece_bytes: int | None = None) -> TraceFile:
    """Decode ``chunks`` of a trace's text, handing each piece's decoded events to ``on_events``
    in file order; returns the file's fields with the events not handed on. Raises ``TraceError``.

    ``first_piece_bytes``: the size of the first piece, where it is to be handed on sooner (a
    consumer in another thread then starts on it while the next piece is read).

    ``decode`` False: each piece is only checked to be a JSON list, and handed on as its text
    (``b"[...]"``), for ``decode_events`` elsewhere (another process)."""
    it = iter(chunks)
    buf = bytearray()
    head_end = None
    for chunk in it:
        buf += chunk
        head_end = _head_end(buf)
        if head_end is not None:
            break
    if not head_end or head_end < 0:  # not streamable: the whole text as one document
        for chunk in it:
            buf += chunk
        return decode_document(path, buf)
    head = bytes(buf[:head_end])
    del buf[:head_end - 1]  # the buffer keeps the array's "[": a piece is one slice of it
    consumed = head_end  # the file offset of buf[1]
    size = first_piece_bytes or piece_bytes
    for chunk in chain([b""], it):  # (the text read with the head may hold a first piece)
        buf += chunk
        while len(buf) > size:
            taken, buf = _hand_on_piece(path, buf, consumed, on_events, decode)
            if not taken:
                break  # one event longer than a piece: wait for more text
            consumed += taken
            size = piece_bytes
    if len(buf) > TAIL_BYTES:  # the rest is one more piece: up to the array's end where it is found
        end = _array_end(head, buf)
        if end is not None and _hand_on_all(path, buf, end, consumed, on_events, decode):
            return decode_document(path, head + buf[end:])
        _, buf = _hand_on_piece(path, buf, consumed, on_events, decode)  # all but the last event
    del buf[0]
    return decode_document(path, head + buf)


def _array_end(head: bytes, buf: bytearray) -> int | None:
    """Where the event array ends in the text's rest (``buf``, starting with its ``[``): the last
    ``]`` of the final ``TAIL_BYTES`` that follows a ``}`` and after which the text, read with the
    head, is a document with no events; None when none is found in ``_ATTEMPTS`` tries."""
    i, low = len(buf), max(len(buf) - TAIL_BYTES, 1)
    for _ in range(_ATTEMPTS):
        i = buf.rfind(b"]", low, i)
        if i < 0:
            return None
        j = i - 1
        while j > 0 and buf[j] in _WHITESPACE:
            j -= 1
        if buf[j] == ord("}"):
            try:
                doc = _ANY.decode(head + buf[i:])
            except (msgspec.MsgspecError, RecursionError):
                continue
            if doc == [] or isinstance(doc, dict) and doc.get("traceEvents") == []:
                return i
    return None


def _hand_on_all(path: str, buf: bytearray, end: int, consumed: int, on_events: Callable[[Any], None],
                 decode: bool) -> bool:
    """Decode and hand on ``buf[:end + 1]`` (every remaining event, ``_array_end``'s cut); False
    when that text is no JSON list after all (nothing handed on)."""
    piece = memoryview(buf)[:end + 1]
    try:
        events = _events_of(path, piece, consumed, decode)
    except msgspec.DecodeError:
        return False
    finally:
        del piece
    on_events(events)
    return True


def _head_end(buf: bytearray) -> int | None:
    """Where the event array's contents start; None: not known yet; -1: not to be streamed."""
    m = _FIRST_NON_WHITESPACE.search(buf)  # (no copy of the buffer, unlike lstrip)
    if m is None:
        return None
    start = m.start()
    if buf[start] == ord("["):
        return start + 1
    if buf[start] != ord("{"):
        return -1
    m = _EVENTS_KEY.search(buf, start, HEAD_LIMIT)
    if m is None:
        return -1 if len(buf) >= HEAD_LIMIT else None
    try:  # the key is the document's own, not text inside an earlier field
        head = _ANY.decode(bytes(buf[:m.end()]) + b"]}")
    except (msgspec.MsgspecError, RecursionError):
        return -1
    return m.end() if isinstance(head, dict) and head.get("traceEvents") == [] else -1


def _boundaries(buf: bytearray, end: int):
    """Positions of commas between ``}`` and ``{`` before ``end``, last first."""
    i = end
    while True:
        i = buf.rfind(b"{", 0, i)
        if i <= 0:
            return
        j = i - 1
        while j > 0 and buf[j] in _WHITESPACE:
            j -= 1
        if buf[j] != ord(","):
            continue
        k = j - 1
        while k > 0 and buf[k] in _WHITESPACE:
            k -= 1
        if buf[k] == ord("}"):
            yield j
        i = j


def _hand_on_piece(path: str, buf: bytearray, consumed: int, on_events: Callable[[Any], None],
                   decode: bool) -> tuple[int, bytearray]:
    """Decode and hand on the buffer's events up to its last boundary (``_decode_piece``); returns
    the bytes handed on (0: no boundary found yet) and the buffer of the rest, whose "[" is the
    comma after them. The events handed on keep the old buffer (not copied): the rest is a new
    one."""
    cut = _decode_piece(path, buf, consumed, on_events, decode)
    if cut is None:
        return 0, buf
    rest = bytearray(b"[")
    with memoryview(buf) as view:
        rest += view[cut + 1:]
    return cut, rest


def _decode_piece(path: str, buf: bytearray, consumed: int, on_events: Callable[[Any], None],
                  decode: bool) -> int | None:
    """Decode the events before the buffer's last boundary that is one (``buf`` starts with the
    ``[`` before them), and hand them on; returns the boundary's comma position, or None when none
    is found yet (more text may hold one; text that is not JSON is then reported by the decode of
    the rest). Decoded events are handed on as a view of ``buf`` (``buf[:cut + 1]``, the comma made
    "]"), which the caller then leaves as it is; text for other processes as a copy."""
    error_at = len(buf) + 1  # boundaries at or after a JSON error are no use
    for attempt, cut in enumerate(_boundaries(buf, len(buf))):
        if attempt == _ATTEMPTS:
            return None
        if cut >= error_at:
            continue
        buf[cut] = ord("]")  # buf[0] is "[": the piece is buf[:cut + 1]
        piece = memoryview(buf)[:cut + 1]
        try:
            events = _events_of(path, piece, consumed, decode)
        except msgspec.DecodeError as exc:  # a cut inside a string or a nested value: go earlier
            buf[cut] = ord(",")  # (the view of it is gone once this function returns)
            m = _ERROR_BYTE.search(str(exc))
            if m:
                error_at = min(error_at, int(m.group(1)))
            continue
        finally:
            del piece
        on_events(events)
        return cut
    return None


def _events_of(path: str, piece: memoryview, consumed: int, decode: bool) -> Any:
    """The events of a piece (``decode``), or else its text checked to be a JSON list and copied
    (for another process). Raises ``msgspec.DecodeError`` for text that is no JSON list (a cut in
    the wrong place), ``TraceError`` for a list that is not of trace events."""
    try:
        if decode:
            return decode_events(piece)
        _JSON_LIST.decode(piece)
        return bytes(piece)  # (one copy, for another process)
    except msgspec.ValidationError as exc:
        raise TraceError(path, f"not a Chrome/Kineto trace ({exc}, in the events after "
                               f"byte {consumed})") from None
    except RecursionError:
        raise TraceError(path, "not a Chrome/Kineto trace (JSON nested too deeply)") from None


def decode_events(piece: bytes | memoryview) -> Any:
    """A piece of the event list (``b"[...]"``) as events: scanned into columns by the native
    scanner where it reads the piece (``trace_scan``), else decoded into structs."""
    try:
        scanned = scan_piece(piece)
    except ValueError:  # not JSON, says the scanner: msgspec says where (or reads it after all)
        scanned = None
    if scanned is not None:
        return scanned
    try:
        return TAGGED_EVENTS.decode(piece)
    except msgspec.ValidationError:  # an unusual phase or event: read it the loose way
        return LOOSE_EVENTS.decode(piece)


def decode_document(path: str, data: Any) -> TraceFile:
    """A whole trace document (or the head and tail of one) as a ``TraceFile``."""
    if not data or data.isspace():
        raise TraceError(path, "empty file")
    doc: TraceFile | list[Any]
    try:
        try:
            doc = TAGGED_DECODER.decode(data)
        except msgspec.ValidationError:  # an unusual phase or event: read it the loose way
            doc = LOOSE_DECODER.decode(data)
    except msgspec.ValidationError as exc:
        raise TraceError(path, f"not a Chrome/Kineto trace ({exc})") from None
    except msgspec.DecodeError as exc:
        raise TraceError(path, f"invalid JSON ({exc})") from None
    except RecursionError:
        raise TraceError(path, "not a Chrome/Kineto trace (JSON nested too deeply)") from None
    if isinstance(doc, list):
        doc = TraceFile(traceEvents=doc)
    if doc.traceEvents is None:
        raise TraceError(path, "not a Chrome/Kineto trace (no 'traceEvents' list)")
    return doc
