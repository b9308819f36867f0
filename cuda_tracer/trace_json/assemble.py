"""Joins the parts of a trace read chunk by chunk into one ``EventBatch``, exactly as if the whole
file had been converted at once.

Each part is one chunk's events converted on their own (``trace_convert``), with its own string table
(event names first, in first-seen order, then side-table keys) and its own side table, whose entries
carry an order code (which step of the conversion added them). Joining them:

- the string table is every part's event names in first-seen order, then the side-table keys in
  the order the whole-file conversion would first use them;
- side-table entries are ordered by (order code, row), as the whole-file conversion adds them: each
  part's entries are sorted and filed under their codes as the part arrives, so that the join only
  puts the codes one after the other;
- each part's columns are copied into the whole-file columns as the part arrives (``Assembly``,
  while later pieces are still being read) and then dropped, so the peak is the columns plus a
  part, not twice the columns; the freed pages are handed back to the system at the end
  (``release_freed_memory``).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import numpy as np

from cuda_tracer.model.events import COLUMNS, EventBatch
from cuda_tracer.model.string_table import StringTable


def _malloc_trim():
    try:
        trim = ctypes.CDLL(None).malloc_trim  # glibc: hands free pages inside the heap back
    except (OSError, AttributeError):  # another C library: freed memory stays with the process
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


_TRIM = _malloc_trim()
TRIM_ROWS = 500_000  # smaller batches leave too little behind to be worth a trim per column


def release_freed_memory() -> None:
    """Return the C heap's free pages to the system. The parts' columns are many arrays of a few
    hundred KiB, allocated between the decoded pieces; once freed they leave holes the heap cannot
    give back by itself, so without this a joined batch would cost about twice its size in
    resident memory."""
    if _TRIM is not None:
        _TRIM(0)


@dataclass
class Part:
    """One chunk's events as columns: times relative to the file's ``baseTimeNanoseconds``."""

    columns: dict[str, np.ndarray]
    strings: list[str]
    names: int  # strings[:names] are event names, the rest side-table keys
    extra_row: list[int] = field(default_factory=list)
    extra_key: list[int] = field(default_factory=list)
    extra_value: list[Any] = field(default_factory=list)
    extra_order: list[int] = field(default_factory=list)
    processes: dict[str, str] = field(default_factory=dict)
    threads: dict[str, str] = field(default_factory=dict)
    flows: int = 0
    skipped: int = 0
    window: list[int] | None = None  # the first profiler event's [start, end]
    strings_cut: int = 0  # side-table values cut to ``MAX_STRING_CHARS`` (``trace_json.columns``)

    def __len__(self) -> int:
        return len(self.columns["kind"])


def assemble(parts: list[Part]) -> tuple[EventBatch, Part]:
    """One batch from ``parts`` (emptied as it goes), and a ``Part`` without columns holding the
    merged per-file facts (process and thread names, counts, profiler window)."""
    assembly = Assembly(sum(map(len, parts)))
    for p in parts:
        assembly.add(p)
    parts.clear()
    return assembly.join()


class Assembly:
    """Parts joined as they arrive, in file order: each part's names are interned (first-seen
    order) and its columns copied into the whole-file columns at once, then dropped, so that a file
    read in pieces is joined while later pieces are still being read, and memory holds the columns
    and one part. ``capacity``: the rows expected (the columns grow past it if need be)."""

    def __init__(self, capacity: int = 0) -> None:
        self.capacity = capacity
        self.columns: dict[str, np.ndarray] = {}
        self.rows = 0
        self.parts: list[Part] = []  # the parts added, their columns dropped but for a first one
        self.lengths: list[int] = []
        self.remaps: list[np.ndarray] = []
        self.table = StringTable()  # the joined batch's strings
        self.intern = self.table.intern
        # the side tables of the parts copied, by order code: each part's entries of that code in
        # file order (whole-file rows, local keys, parts, values) and the (part, local key) pairs in
        # order of first use, so that the join only concatenates the codes in order
        self.side: dict[int, _CodeEntries] = {}

    def add(self, part: Part) -> None:
        """Take ``part`` (its columns are emptied). The first part is kept whole until a second
        one comes: a single part is its own batch (``_single``)."""
        self.parts.append(part)
        self.lengths.append(len(part))
        self.remaps.append(np.array([self.intern(s) for s in part.strings[:part.names]] +
                                    [-1] * (len(part.strings) - part.names), np.int64))
        if len(self.parts) == 2:
            self._copy_columns(0)
        if len(self.parts) >= 2:
            self._copy_columns(len(self.parts) - 1)

    def _copy_columns(self, at: int) -> None:
        part, n = self.parts[at], self.lengths[at]
        if not self.columns:
            self.capacity = max(self.capacity, n)
            self.columns = {name: np.empty(self.capacity, dt) for name, dt in COLUMNS.items()}
        if self.rows + n > self.capacity:  # more rows than expected: grow (in place where it can)
            self.capacity = max(self.rows + n, self.capacity + self.capacity // 2)
            for column in self.columns.values():
                column.resize(self.capacity, refcheck=False)
        end = self.rows + n
        for name, column in self.columns.items():
            values = part.columns.pop(name)
            column[self.rows:end] = self.remaps[at][values] if name == "name" else values
        self._sort_side(part, at)
        self.rows = end

    def _sort_side(self, part: Part, at: int) -> None:
        """The part's side-table entries put in file order (order code, row; stable within a row)
        under their codes; the part's rows are already in file order after those added before."""
        rows = np.asarray(part.extra_row, np.int64)
        if len(rows):
            codes = np.asarray(part.extra_order, np.int64)
            keys = np.asarray(part.extra_key, np.int64)
            sort = np.lexsort((rows, codes))
            codes = codes[sort]
            starts = np.flatnonzero(np.concatenate(([True], codes[1:] != codes[:-1])))
            for code, lo, hi in zip(codes[starts].tolist(), starts.tolist(), [*starts[1:].tolist(), len(sort)]):
                take = sort[lo:hi]
                entries = self.side.setdefault(code, _CodeEntries())
                entries.rows.append(rows[take] + self.rows)
                entries.keys.append(keys[take])
                entries.parts.append(np.full(len(take), at, np.int64))
                entries.values += map(part.extra_value.__getitem__, take.tolist())
                distinct, first = np.unique(keys[take], return_index=True)
                entries.first_used += ((at, k) for k in distinct[np.argsort(first)].tolist())
        part.extra_row, part.extra_order, part.extra_key, part.extra_value = [], [], [], []

    def join(self) -> tuple[EventBatch, Part]:
        """The batch of every part added, and the merged per-file facts (see ``assemble``)."""
        parts = self.parts
        facts = Part(columns={}, strings=[], names=0)
        for p in parts:
            facts.processes.update(p.processes)
            facts.threads.update(p.threads)
            facts.flows += p.flows
            facts.skipped += p.skipped
            facts.strings_cut += p.strings_cut
            if facts.window is None:
                facts.window = p.window
        if len(parts) == 1:
            return _single(parts.pop()), facts
        # side table: the order codes' entries one after the other (each code's in file order)
        codes = [self.side[c] for c in sorted(self.side)]
        remaps = self.remaps
        for at, key in (pair for entries in codes for pair in entries.first_used):  # keys interned
            if remaps[at][key] < 0:                                               # in order of first use
                remaps[at][key] = self.intern(parts[at].strings[key])
        rows = _joined([a for entries in codes for a in entries.rows])
        local_keys = _joined([a for entries in codes for a in entries.keys])
        part_of = _joined([a for entries in codes for a in entries.parts])
        values = list(chain.from_iterable(entries.values for entries in codes))
        flat = np.concatenate(remaps)
        starts = np.cumsum([0] + [len(r) for r in remaps[:-1]])
        keys = flat[starts[part_of] + local_keys].astype(np.int32)
        for column in self.columns.values():
            if self.capacity > self.rows:
                column.resize(self.rows, refcheck=False)  # the unused rows handed back
        if self.rows >= TRIM_ROWS:
            release_freed_memory()  # the parts' copies, in the C heap's holes: back to the system
        batch = EventBatch(self.columns, self.table.strings, rows, keys, values)
        self.parts, self.columns, self.side = [], {}, {}
        return batch, facts


def _joined(arrays: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(arrays) if arrays else np.zeros(0, np.int64)


@dataclass
class _CodeEntries:
    """The side-table entries of one order code, part by part (``Assembly``)."""

    rows: list[np.ndarray] = field(default_factory=list)
    keys: list[np.ndarray] = field(default_factory=list)
    parts: list[np.ndarray] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)
    first_used: list[tuple[int, int]] = field(default_factory=list)


def _single(p: Part) -> EventBatch:
    """The batch of a file read as one part: its names are in whole-file order already."""
    rows = np.asarray(p.extra_row, np.int64)
    sort = np.lexsort((rows, np.asarray(p.extra_order, np.int64))) if len(rows) else rows
    return EventBatch(p.columns, p.strings, rows[sort], np.asarray(p.extra_key, np.int32)[sort],
                      list(map(p.extra_value.__getitem__, sort.tolist())))
