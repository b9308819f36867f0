"""Pieces of a trace's event list scanned straight into columns by the native scanner
(``_scan.c``), and the args of scanned events read field by field.

Decoding every event into a struct and reading each field back out of all of them is about two
thirds of a large trace's import in Python; the scanner reads the same fields in one pass over the
text, with no Python object per event (``docs/benchmarks.md`` has the figures). It is built when the
package is installed with a C compiler at hand; without it (or with ``OTEL_PROFILER_PURE_PYTHON=1``)
every piece takes the Python path, which stays the definition of the results: the scanner hands back
to it any piece it does not read the same way, and the args it does not read whole.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from itertools import compress, repeat
from operator import attrgetter, is_not
from typing import Any

import msgspec
import numpy as np

from cuda_tracer.model.events import MISSING
from cuda_tracer.trace_json.columns import int_triples, ints, to_int
from cuda_tracer.trace_json.schema import NO_ARGS, Event, decode_args

try:
    from . import _scan
except ImportError:  # built without a C compiler: the Python path reads everything
    _scan = None  # type: ignore[assignment]

ARG_COLUMNS = ("external_id", "external_id_legacy", "correlation", "device", "stream", "bytes",
               "registers", "shared_memory", "graph_id", "grid", "grid_y", "grid_z", "block",
               "block_y", "block_z", "mem_bytes", "mem_device_id", "total_allocated", "total_reserved",
               "mem_device_type", "shapes")
_ARG_INDEX = {name: i for i, name in enumerate(ARG_COLUMNS)}
COMMON_ARGS = 3
"""The first ``COMMON_ARGS`` args columns (the ids) have a slot per event; the rest live in rare rows."""
_DECODE_STRING = msgspec.json.Decoder(str).decode
_JSON_VALUE = msgspec.json.Decoder().decode


def native_scanner() -> bool:
    """Whether pieces are scanned natively (the extension is built and not switched off)."""
    return (_scan is not None and (_scan.N_ARGS, getattr(_scan, "N_COMMON_ARGS", 0)) ==
            (len(ARG_COLUMNS), COMMON_ARGS)  # (not an older build's)
            and os.environ.get("OTEL_PROFILER_PURE_PYTHON", "") in ("", "0"))


@dataclass
class ScannedPiece:
    """One piece's events as the scanner read them: one entry per event, in file order.

    ``strings`` holds each distinct name and category; ``name``/``cat`` index it (-1: none, or no
    string). Times are exact ns (``dur`` 0 when absent). ``odd`` lists the pid/tid values that are
    no plain integer as (row, field, JSON text); ``slow`` marks events whose args are to be decoded
    the Python way, from ``piece[args_start:args_end]`` (-1: no args). ``args`` holds the
    ``COMMON_ARGS`` first args columns of each event; the others are in ``rare``, one row for each
    event that has any of them (``rare_at``; -1: none, every such field absent)."""

    piece: bytes | memoryview
    strings: list[str]
    phase: np.ndarray
    name: np.ndarray
    cat: np.ndarray
    ts: np.ndarray
    dur: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    odd: list[tuple[int, str, bytes]]
    slow: np.ndarray
    args_start: np.ndarray
    args_end: np.ndarray
    args: np.ndarray  # (events, COMMON_ARGS) int64, MISSING where absent
    stack: np.ndarray  # the "Call stack" in ``strings``; -1: none, or ""
    rare_at: np.ndarray  # int32 per event: its row of ``rare``, -1: none
    rare: np.ndarray  # (rare rows, len(ARG_COLUMNS) - COMMON_ARGS) int64, MISSING where absent

    def __len__(self) -> int:
        return len(self.phase)

    def arg_values(self, first: int, width: int, rows: np.ndarray) -> np.ndarray:
        """Args columns ``first`` to ``first + width`` (``ARG_COLUMNS`` positions, all of them
        common or all rare) of ``rows``: shape ``(len(rows), width)``, MISSING where absent."""
        if first < COMMON_ARGS:
            return self.args[rows, first:first + width]
        at = self.rare_at[rows]
        has = np.flatnonzero(at >= 0)
        out = np.full((len(rows), width), MISSING, np.int64)
        if len(has):
            out[has] = self.rare[at[has], first - COMMON_ARGS:first - COMMON_ARGS + width]
        return out

    def raw_args(self, rows: np.ndarray) -> list:
        """The args text of ``rows`` (``{}`` where an event has none), for ``decode_args``."""
        piece, start, end = self.piece, self.args_start[rows].tolist(), self.args_end[rows].tolist()
        return [msgspec.Raw(piece[s:e]) if s >= 0 else NO_ARGS for s, e in zip(start, end)]

    def ids(self, field: str, rows: np.ndarray) -> np.ndarray:
        """pid or tid of ``rows`` as integers (odd values the way ``trace_columns.to_int`` reads
        them)."""
        values = (self.pid if field == "pid" else self.tid).copy()
        for row, name, text in self.odd:
            if name == field:
                values[row] = to_int(self.odd_value(text))
        return values[rows]

    @staticmethod
    def odd_value(text: bytes) -> Any:
        return _JSON_VALUE(text)

    def metadata_events(self, rows: np.ndarray) -> list[Event]:
        """The events at ``rows`` (metadata, few) as decoded ``Event`` structs (name, pid, tid,
        args)."""
        odd = {(row, field): self.odd_value(text) for row, field, text in self.odd}
        raw = self.raw_args(rows)
        events = []
        for j, r in enumerate(rows.tolist()):
            name = self.strings[self.name[r]] if self.name[r] >= 0 else None
            pid = odd.get((r, "pid"), int(self.pid[r]))
            tid = odd.get((r, "tid"), int(self.tid[r]))
            events.append(Event(name=name, pid=pid, tid=tid, args=raw[j]))
        return events


def scan_piece(piece: bytes | memoryview) -> ScannedPiece | None:
    """The events of ``piece`` (``b"[...]"``) scanned into columns, or None: read the piece the
    Python way (no scanner, or something in it the scanner leaves to Python). Raises
    ``ValueError`` ending "(byte N)" when the text is not JSON."""
    if not native_scanner():
        return None
    found = _scan.scan(piece, _DECODE_STRING)
    if found is None:
        return None
    (count, strings, phase, name, cat, ts, dur, pid, tid, odd, slow, args_start, args_end,
     args, stack, rare_at, rare) = found
    return ScannedPiece(piece, strings, np.frombuffer(phase, np.uint8),
                        np.frombuffer(name, np.int32), np.frombuffer(cat, np.int32),
                        np.frombuffer(ts, np.int64), np.frombuffer(dur, np.int64),
                        np.frombuffer(pid, np.int64), np.frombuffer(tid, np.int64), odd,
                        np.frombuffer(slow, np.uint8).view(bool), np.frombuffer(args_start, np.int64),
                        np.frombuffer(args_end, np.int64),
                        np.frombuffer(args, np.int64).reshape(count, COMMON_ARGS),
                        np.frombuffer(stack, np.int32), np.frombuffer(rare_at, np.int32),
                        np.frombuffer(rare, np.int64).reshape(-1, len(ARG_COLUMNS) - COMMON_ARGS))


class DecodedArgs:
    """The args of some rows decoded into structs (``trace_schema``), read field by field."""

    def __init__(self, items: list) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def ints(self, field: str, at: np.ndarray | None = None) -> np.ndarray:
        return ints(list(map(attrgetter(field), self._at(at))))

    def triples(self, field: str, at: np.ndarray) -> np.ndarray:
        return int_triples(list(map(attrgetter(field), self._at(at))))

    def present_ints(self, field: str) -> tuple[np.ndarray, np.ndarray]:
        """Which rows have ``field`` (not None), and its values there as integers."""
        values = list(map(attrgetter(field), self.items))
        present = np.fromiter(map(is_not, values, repeat(None)), bool, len(values))
        return present, ints(list(compress(values, present)))

    def _at(self, at: np.ndarray | None):
        """The structs at positions ``at`` (all of them for None), with no Python loop."""
        return self.items if at is None else map(self.items.__getitem__, at.tolist())

    def call_stacks(self) -> tuple[list[int], list[str]]:
        """Positions and texts of the rows' non-empty ``Call stack`` strings."""
        stacks = list(map(attrgetter("call_stack"), self.items))
        if stacks.count(None) == len(stacks):
            return [], []
        found = [j for j, stack in enumerate(stacks) if isinstance(stack, str) and stack]
        return found, [stacks[j] for j in found]


class ScannedArgs:
    """The args of some scanned rows, read from the scanner's columns (no struct per event)."""

    items = None  # nothing decoded: these rows carry no collective, call stack or sync detail

    def __init__(self, scanned: "ScannedPiece", rows: np.ndarray) -> None:
        self.scanned, self.columns, self.rows = scanned, scanned.args, rows

    def __len__(self) -> int:
        return len(self.rows)

    def ints(self, field: str, at: np.ndarray | None = None) -> np.ndarray:
        rows = self.rows if at is None else self.rows[at]
        i = _ARG_INDEX[field]
        if i < COMMON_ARGS:
            return self.columns[:, i][rows]  # (a column's view, then a flat gather)
        return self.scanned.arg_values(i, 1, rows)[:, 0]

    def triples(self, field: str, at: np.ndarray) -> np.ndarray:
        return self.scanned.arg_values(_ARG_INDEX[field], 3, self.rows[at])

    def present_ints(self, field: str) -> tuple[np.ndarray, np.ndarray]:
        """Which rows have ``field``, and its values there (the scanner leaves MISSING only where
        a ``[memory]`` field is absent: an explicit -1 marks the row slow)."""
        values = self.ints(field)
        present = values != MISSING
        return present, values[present]

    def call_stacks(self) -> tuple[list[int], list[str]]:
        """Positions and texts of the rows' non-empty ``Call stack`` strings."""
        ids = self.scanned.stack[self.rows]
        found = np.flatnonzero(ids >= 0)
        strings = self.scanned.strings
        return found.tolist(), [strings[i] for i in ids[found].tolist()]


class StructArgsSource:
    """Args of decoded events: every row is decoded (``decode_args``) for its group."""

    def __init__(self, raw_args: tuple) -> None:
        self.raw_args = raw_args

    def views(self, rows: np.ndarray, decoder: msgspec.json.Decoder, decode_all: np.ndarray):
        return [(rows, DecodedArgs(decode_args(self.raw_args, rows, decoder)))]

    def shaped(self, rows: np.ndarray) -> np.ndarray:
        """Positions in ``rows`` that may hold shapes: all of them (``operator_shapes`` looks)."""
        return np.arange(len(rows))

    def texts(self, rows: np.ndarray) -> list[bytes]:
        """The args text of ``rows``."""
        return list(map(bytes, map(self.raw_args.__getitem__, rows.tolist())))


class ScannedArgsSource:
    """Args of scanned events (``rows`` of the part are ``piece_rows`` of the piece): read from the
    scanner's columns, except the rows it marked slow and those ``decode_all`` asks for, decoded the
    Python way."""

    def __init__(self, scanned: ScannedPiece, piece_rows: np.ndarray) -> None:
        self.scanned, self.piece_rows = scanned, piece_rows

    def views(self, rows: np.ndarray, decoder: msgspec.json.Decoder, decode_all: np.ndarray):
        at = self.piece_rows[rows]
        slow = self.scanned.slow[at] | decode_all
        views: list[tuple[np.ndarray, ScannedArgs | DecodedArgs]] = []
        fast = np.flatnonzero(~slow)
        if len(fast):
            views.append((rows[fast], ScannedArgs(self.scanned, at[fast])))
        slow_rows = np.flatnonzero(slow)
        if len(slow_rows):
            raw = tuple(self.scanned.raw_args(at[slow_rows]))
            views.append((rows[slow_rows],
                          DecodedArgs(decode_args(raw, np.arange(len(raw)), decoder))))
        return views

    def shaped(self, rows: np.ndarray) -> np.ndarray:
        """Which of ``rows`` recorded their inputs' shapes (the scanner marks an ``Input Dims``
        key), as positions in ``rows``."""
        return np.flatnonzero(self.scanned.arg_values(_ARG_INDEX["shapes"], 1, self.piece_rows[rows])[:, 0]
                              != MISSING)

    def texts(self, rows: np.ndarray) -> list[bytes]:
        """The args text of ``rows`` (``b"{}"`` where an event has none)."""
        at = self.piece_rows[rows]
        piece, start, end = self.scanned.piece, self.scanned.args_start[at].tolist(), self.scanned.args_end[at].tolist()
        return [bytes(piece[s:e]) if s >= 0 else b"{}" for s, e in zip(start, end)]

