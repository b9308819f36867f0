"""The one event model every source produces and every analysis reads: a columnar ``EventBatch``.

An ``EventBatch`` is a set of equally long numpy columns plus a string table. Names (kernel names,
API names, annotation names) are stored once in ``strings`` and referenced by index from the ``name``
column, so a million launches of the same kernel cost one string. Rare per-event attributes (a
collective's message size, a sync event's awaited stream, ...) live in a sparse side table
(``extra_row``/``extra_key``/``extra_value``) instead of a column.

Times are integers: nanoseconds since the Unix epoch. Missing integers are ``-1`` (``MISSING``).
"""

from __future__ import annotations

import enum
import functools
import io
import json
import zipfile
import zlib
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np

from cuda_tracer.model.bounded import file_allowance, read_member, read_npy_member
from cuda_tracer.model.string_table import StringTable

MISSING = -1


COMPARED_CODES = 3
"""Up to this many wanted codes ``kinds_in`` compares one by one; more go through a table."""


def kinds_in(codes: np.ndarray, wanted: Iterable[int]) -> np.ndarray:
    """``np.isin(codes, wanted)`` for a uint8 column of codes (kinds, phases): up to
    ``COMPARED_CODES`` codes compared one by one, more through a 256-entry table (``take``, about
    twice the speed of indexing the table). Both are several times faster than ``np.isin``: on a
    rank's 5,000 rows, 1.5-3.3 µs for one or two codes and 5.7 µs for the table, against 12 µs
    for indexing it; on 2M rows, 0.1-0.3 ms for one or two codes and 2.5 ms for the table,
    against 4.8 ms."""
    wanted = tuple(wanted)
    if codes.dtype != np.uint8:
        return np.isin(codes, np.asarray(wanted))
    if 0 < len(wanted) <= COMPARED_CODES:
        out = codes == wanted[0]
        for code in wanted[1:]:
            out |= codes == code
        return out
    return _code_table(wanted).take(codes)


@functools.lru_cache(maxsize=64)
def _code_table(wanted: tuple[int, ...]) -> np.ndarray:
    """The 256-entry table of ``kinds_in``, made once per set of codes (from enum members, a
    conversion that costs more than the look-up on a rank's few thousand rows)."""
    table = np.zeros(256, bool)
    table[np.asarray(wanted, np.uint8)] = True
    table.flags.writeable = False
    return table


class Kind(enum.IntEnum):
    """What an event is. GPU-side kinds run on a device stream; the rest run on a CPU thread."""

    KERNEL = 1
    MEMCPY = 2
    MEMSET = 3
    SYNC = 4
    RUNTIME = 5
    DRIVER = 6
    CPU_OP = 7
    USER_ANNOTATION = 8
    GPU_USER_ANNOTATION = 9
    STEP = 10
    PYTHON_FUNCTION = 11
    OVERHEAD = 12
    INSTANT = 13
    MEMORY = 14
    PROFILER = 15
    OTHER = 16


class MemcpyKind(enum.IntEnum):
    """Direction of a copy (``subkind`` of a MEMCPY event), as CUPTI and Kineto name it."""

    UNKNOWN = 0
    HtoD = 1
    DtoH = 2
    DtoD = 3
    PtoP = 4
    HtoH = 5


class SyncKind(enum.IntEnum):
    """What a SYNC event waited for (``subkind`` of a SYNC event)."""

    UNKNOWN = 0
    STREAM = 1
    EVENT = 2
    CONTEXT = 3
    STREAM_WAIT_EVENT = 4


GPU_OP_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)
"""Work that occupies a GPU stream: what utilization, idle time and launch statistics count."""

LAUNCH_KINDS = (Kind.RUNTIME, Kind.DRIVER)
"""CPU-side API calls that can enqueue GPU work."""

# The columns of a batch, with their dtype. Order is the on-disk order.
COLUMNS: dict[str, np.dtype] = {
    "kind": np.dtype(np.uint8),
    "subkind": np.dtype(np.uint8),
    "name": np.dtype(np.int32),
    "start_ns": np.dtype(np.int64),
    "end_ns": np.dtype(np.int64),
    "pid": np.dtype(np.int64),
    "tid": np.dtype(np.int64),
    "rank": np.dtype(np.int32),
    "device": np.dtype(np.int32),
    "stream": np.dtype(np.int64),
    "correlation": np.dtype(np.int64),
    "external_id": np.dtype(np.int64),
    "graph_id": np.dtype(np.int64),
    "bytes": np.dtype(np.int64),
    "grid_x": np.dtype(np.int32),
    "grid_y": np.dtype(np.int32),
    "grid_z": np.dtype(np.int32),
    "block_x": np.dtype(np.int32),
    "block_y": np.dtype(np.int32),
    "block_z": np.dtype(np.int32),
    "registers": np.dtype(np.int32),
    "shared_memory": np.dtype(np.int64),
}

_FORMAT = "otel-profiler.event-batch"
_FORMAT_VERSION = 1
_FORMER_NAMES = {"shared_memory": "shared_mem"}
"""Columns renamed since format version 1 -> the name a batch written before holds them under."""


@dataclass(eq=False)
class EventBatch:
    """Columnar events. Build one with :class:`BatchBuilder` or :meth:`from_columns`.

    Once built, a batch's ``kind``, ``name`` and launch-geometry columns are not changed in place:
    analyses keep tables made from them in the instance (``_kernel_classes``, ``_kernel_shapes``)
    and use them again for the same batch."""

    columns: dict[str, np.ndarray]
    strings: list[str]
    extra_row: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    extra_key: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    extra_value: list[Any] = field(default_factory=list)

    # ------------------------------------------------------------------ construction
    @classmethod
    def empty(cls) -> "EventBatch":
        return cls({name: np.zeros(0, dt) for name, dt in COLUMNS.items()}, [])

    @classmethod
    def from_columns(cls, strings: Sequence[str], **columns: Any) -> "EventBatch":
        """Build from whole columns; columns not given are filled with ``MISSING``.

        ``kind``, ``name``, ``start_ns`` and ``end_ns`` are required. ``name`` indexes ``strings``.
        """
        n = len(columns["kind"])
        out: dict[str, np.ndarray] = {}
        for col, dt in COLUMNS.items():
            if col in columns:
                arr = np.asarray(columns[col], dtype=dt)
                if arr.shape != (n,):
                    raise ValueError(f"column {col!r} has shape {arr.shape}, expected ({n},)")
            else:
                arr = np.full(n, 0 if col == "subkind" else MISSING, dt)
            out[col] = arr
        unknown = set(columns) - set(COLUMNS)
        if unknown:
            raise ValueError(f"unknown columns: {sorted(unknown)}")
        return cls(out, list(strings))

    # ------------------------------------------------------------------ basics
    def __getstate__(self) -> dict[str, Any]:
        """The batch without the tables kept in it (``_duration``, the analyses' ones): a batch
        pickled to another process carries its columns only, and the tables are made again there."""
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_")}

    def __len__(self) -> int:
        return len(self.columns["kind"])

    def __getattr__(self, name: str) -> np.ndarray:
        # Columns read as attributes: batch.start_ns, batch.kind, ...
        columns = self.__dict__.get("columns")
        if columns is not None and name in columns:
            return columns[name]
        raise AttributeError(name)

    @property
    def duration_ns(self) -> np.ndarray:
        """``end_ns - start_ns`` (read-only), made once for the columns it was made of: a summary
        reads it about twenty times (16 MB each time for 2M events)."""
        start, end = self.columns["start_ns"], self.columns["end_ns"]
        made = self.__dict__.get("_duration")
        if made is not None and made[0] is start and made[1] is end:
            return made[2]
        duration = end - start
        duration.flags.writeable = False
        self.__dict__["_duration"] = (start, end, duration)
        return duration

    def names(self, rows: np.ndarray | None = None) -> list[str]:
        """The event names of ``rows`` (all rows by default) as Python strings."""
        ids = self.columns["name"] if rows is None else self.columns["name"][rows]
        table = self.strings
        return [table[i] for i in ids.tolist()]

    def name_id(self, name: str) -> int:
        """Index of ``name`` in the string table, or -1 when no event has it."""
        try:
            return self.strings.index(name)
        except ValueError:
            return -1

    def counts_by_kind(self) -> dict[str, int]:
        counts = np.bincount(self.columns["kind"], minlength=len(Kind) + 1)
        return {k.name.lower(): int(counts[k]) for k in Kind if counts[k]}

    def extra(self, key: str) -> dict[int, Any]:
        """The side-table attribute ``key`` as {row: value}."""
        try:
            key_id = self.strings.index(key)
        except ValueError:
            return {}
        hits = np.flatnonzero(self.extra_key == key_id).tolist()  # Python ints: no numpy scalar per row
        values = self.extra_value
        return dict(zip(self.extra_row[hits].tolist(), [values[i] for i in hits]))

    def extra_column(self, key: str, rows: np.ndarray) -> np.ndarray:
        """Integer side-table attribute ``key`` of ``rows`` (ascending) as a column, ``MISSING``
        where a row has none."""
        out = np.full(len(rows), MISSING, np.int64)
        key_id = self.name_id(key)
        if key_id < 0 or not len(rows):
            return out
        hits = np.flatnonzero(self.extra_key == key_id)
        at = self.extra_row[hits]
        pos = np.searchsorted(rows, at)
        inside = pos < len(rows)
        inside[inside] = rows[pos[inside]] == at[inside]
        taken = hits[inside].tolist()
        if taken:
            values = self.extra_value
            out[pos[inside]] = np.fromiter(map(values.__getitem__, taken), np.int64, len(taken))
        return out

    def extras_of(self, row: int) -> dict[str, Any]:
        """Every side-table attribute of one row."""
        hits = np.flatnonzero(self.extra_row == row)
        return {self.strings[int(self.extra_key[i])]: self.extra_value[i] for i in hits}

    # ------------------------------------------------------------------ selection
    def take(self, rows: np.ndarray) -> "EventBatch":
        """A new batch holding ``rows`` (a boolean mask or integer indices), in that order."""
        rows = np.asarray(rows)
        if rows.dtype == bool:
            rows = np.flatnonzero(rows)
        columns = {c: a[rows] for c, a in self.columns.items()}
        if len(self.extra_row):
            # Map old row -> new row for the side table; rows not taken drop their extras.
            remap = np.full(len(self), -1, np.int64)
            remap[rows] = np.arange(len(rows))
            new_rows = remap[self.extra_row]
            keep = np.flatnonzero(new_rows >= 0)
            extra_row, extra_key = new_rows[keep], self.extra_key[keep]
            extra_value = [self.extra_value[i] for i in keep.tolist()]
        else:
            extra_row, extra_key, extra_value = self.extra_row, self.extra_key, []
        return EventBatch(columns, self.strings, extra_row, extra_key, extra_value)

    def of_kind(self, *kinds: Kind) -> "EventBatch":
        return self.take(kinds_in(self.columns["kind"], kinds))

    def between(self, start_ns: int, end_ns: int) -> "EventBatch":
        """Events that overlap the half-open window ``[start_ns, end_ns)``."""
        c = self.columns
        return self.take((c["start_ns"] < end_ns) & (c["end_ns"] > start_ns) |
                         ((c["start_ns"] == c["end_ns"]) & (c["start_ns"] >= start_ns) &
                          (c["start_ns"] < end_ns)))

    def sorted_by_start(self) -> "EventBatch":
        return self.take(np.argsort(self.columns["start_ns"], kind="stable"))

    # ------------------------------------------------------------------ combination
    @staticmethod
    def concat(batches: Iterable["EventBatch"]) -> "EventBatch":
        """One batch holding every event of ``batches`` in order, with a merged string table."""
        batches = [b for b in batches]
        if not batches:
            return EventBatch.empty()
        strings: list[str] = []
        index: dict[str, int] = {}
        parts: dict[str, list[np.ndarray]] = {c: [] for c in COLUMNS}
        extra_rows, extra_keys, extra_values = [], [], []
        offset = 0
        for b in batches:
            remap = np.empty(len(b.strings), np.int32)
            for i, s in enumerate(b.strings):
                j = index.get(s)
                if j is None:
                    j = index[s] = len(strings)
                    strings.append(s)
                remap[i] = j
            for c in COLUMNS:
                col = b.columns[c]
                parts[c].append(remap[col] if c == "name" and len(col) else col)
            if len(b.extra_row):
                extra_rows.append(b.extra_row + offset)
                extra_keys.append(remap[b.extra_key])
                extra_values.extend(b.extra_value)
            offset += len(b)
        columns = {c: np.concatenate(parts[c]).astype(COLUMNS[c], copy=False) for c in COLUMNS}
        return EventBatch(
            columns,
            strings,
            np.concatenate(extra_rows) if extra_rows else np.zeros(0, np.int64),
            np.concatenate(extra_keys).astype(np.int32) if extra_keys else np.zeros(0, np.int32),
            extra_values,
        )

    # ------------------------------------------------------------------ persistence
    def save(self, path_or_file: Any) -> None:
        """Write the batch losslessly (a zip of ``.npy`` columns plus a JSON string table)."""
        with zipfile.ZipFile(path_or_file, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            header = {"format": _FORMAT, "version": _FORMAT_VERSION, "columns": list(COLUMNS)}
            zf.writestr("header.json", json.dumps(header))
            zf.writestr("strings.json", json.dumps(self.strings, ensure_ascii=False))
            zf.writestr("extra_value.json", json.dumps(self.extra_value, ensure_ascii=False))
            arrays = dict(self.columns, extra_row=self.extra_row, extra_key=self.extra_key)
            for name, arr in arrays.items():
                buf = io.BytesIO()
                np.save(buf, arr, allow_pickle=False)
                zf.writestr(f"{name}.npy", buf.getvalue())

    @classmethod
    def load(cls, path_or_file: Any) -> "EventBatch":
        """Read a batch written by :meth:`save`. Raises ``ValueError`` for anything else, and for a
        file that decompresses to more than its size and its columns' headers allow (``bounded``)."""
        try:
            allowance = file_allowance(path_or_file)
            with zipfile.ZipFile(path_or_file) as zf:
                header = json.loads(read_member(zf, "header.json", allowance))
                if not isinstance(header, dict) or header.get("format") != _FORMAT:
                    raise _Unreadable("not an otel-profiler event batch")
                if not isinstance(header.get("version"), int) or header["version"] > _FORMAT_VERSION:
                    raise _Unreadable(f"event batch format version {header.get('version')!r} is not "
                                      f"one this otel-profiler understands ({_FORMAT_VERSION})")
                names = set(zf.namelist())

                def array(name: str, rows: int | None) -> np.ndarray:
                    if f"{name}.npy" not in names:
                        name = _FORMER_NAMES.get(name, name)
                    return read_npy_member(zf, f"{name}.npy", allowance, rows)

                columns: dict[str, np.ndarray] = {}
                for c, dt in COLUMNS.items():  # every column as long as the first
                    first = next(iter(columns.values()), None)
                    columns[c] = array(c, None if first is None else len(first)).astype(dt, copy=False)
                extra_row = array("extra_row", None)
                extra_key = array("extra_key", len(extra_row))
                strings = json.loads(read_member(zf, "strings.json", allowance))
                extra_value = json.loads(read_member(zf, "extra_value.json", allowance))
                batch = cls(columns, strings, extra_row, extra_key, extra_value)
        except _Unreadable as exc:
            raise ValueError(str(exc)) from None
        except (zipfile.BadZipFile, KeyError, json.JSONDecodeError, OSError, EOFError, zlib.error,
                UnicodeDecodeError, TypeError, ValueError, AttributeError, NotImplementedError,
                RuntimeError) as exc:
            raise ValueError(f"not a readable event batch ({exc})") from None
        problem = batch._inconsistency()
        if problem:
            raise ValueError(f"not a readable event batch ({problem})")
        return batch

    def _inconsistency(self) -> str | None:
        """What makes this batch unusable (from a damaged file), or None."""
        n = len(self)
        if any(a.ndim != 1 or len(a) != n for a in self.columns.values()):
            return "columns of different lengths"
        if not isinstance(self.strings, list) or not all(isinstance(s, str) for s in self.strings):
            return "string table is not a list of strings"
        if n and (self.columns["name"].min() < 0 or self.columns["name"].max() >= len(self.strings)):
            return "event names point outside the string table"
        m = len(self.extra_row)
        if (not isinstance(self.extra_value, list) or len(self.extra_key) != m
                or len(self.extra_value) != m or self.extra_row.ndim != 1):
            return "side table columns of different lengths"
        if m and (self.extra_row.min() < 0 or self.extra_row.max() >= n or self.extra_key.min() < 0
                  or self.extra_key.max() >= len(self.strings)):
            return "side table points outside the batch"
        return None


class _Unreadable(Exception):
    pass


class BatchBuilder:
    """Appends events one at a time (for sources that see events one by one) into column lists.

    Only sources use it; analyses work on finished batches.
    """

    def __init__(self) -> None:
        self._cols: dict[str, list[int]] = {c: [] for c in COLUMNS}
        self._strings = StringTable()
        self.intern = self._strings.intern
        self._extra_row: list[int] = []
        self._extra_key: list[int] = []
        self._extra_value: list[Any] = []

    @property
    def strings(self) -> list[str]:
        return self._strings.strings

    def __len__(self) -> int:
        return len(self._cols["kind"])

    def add(self, kind: int, name: str, start_ns: int, end_ns: int, **fields: int) -> int:
        """Append one event and return its row. Fields not given are ``MISSING``."""
        row = len(self._cols["kind"])
        cols = self._cols
        cols["kind"].append(int(kind))
        cols["name"].append(self.intern(name))
        cols["start_ns"].append(start_ns)
        cols["end_ns"].append(end_ns)
        cols["subkind"].append(fields.pop("subkind", 0))
        for c in _PLAIN_COLUMNS:
            cols[c].append(fields.pop(c, MISSING))
        if fields:
            raise ValueError(f"unknown fields: {sorted(fields)}")
        return row

    def add_extra(self, row: int, key: str, value: Any) -> None:
        self._extra_row.append(row)
        self._extra_key.append(self.intern(key))
        self._extra_value.append(value)

    def build(self) -> EventBatch:
        columns = {c: np.asarray(v, dtype=COLUMNS[c]) if v else np.zeros(0, COLUMNS[c])
                   for c, v in self._cols.items()}
        return EventBatch(columns, list(self.strings), np.asarray(self._extra_row, np.int64),
                          np.asarray(self._extra_key, np.int32), list(self._extra_value))


_PLAIN_COLUMNS = tuple(c for c in COLUMNS if c not in ("kind", "subkind", "name", "start_ns", "end_ns"))


def memcpy_kind_from_name(name: str) -> MemcpyKind:
    """Direction from a Kineto/CUPTI copy name such as ``"Memcpy HtoD (Pageable -> Device)"``."""
    for k in (MemcpyKind.HtoD, MemcpyKind.DtoH, MemcpyKind.DtoD, MemcpyKind.PtoP, MemcpyKind.HtoH):
        if k.name in name:
            return k
    return MemcpyKind.UNKNOWN


_SYNC_KIND_BY_NAME = {
    "stream sync": SyncKind.STREAM,
    "event sync": SyncKind.EVENT,
    "context sync": SyncKind.CONTEXT,
    "device sync": SyncKind.CONTEXT,
    "stream wait event": SyncKind.STREAM_WAIT_EVENT,
}


def sync_kind_from_name(name: str) -> SyncKind:
    """Sync kind from Kineto's ``cuda_sync_kind`` (``"Stream Sync"``, ``"Stream Wait Event"``, ...)."""
    return _SYNC_KIND_BY_NAME.get(name.strip().lower(), SyncKind.UNKNOWN)
