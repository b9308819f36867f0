"""Joins the parts of a trace read chunk by chunk into one ``EventBatch``, exactly as if the whole
file had been converted at once.

Each part is one chunk's events converted on their own (``trace_convert``), with its own string table
(event names first, in first-seen order, then side-table keys) and its own side table, whose entries
carry an order code (which step of the conversion added them). Joining them:

- the string table is every part's event names in first-seen order, then the side-table keys in
  the order the whole-file conversion would first use them;
- side-table entries are ordered by (order code, row), as the whole-file conversion adds them;
- each part's columns are copied into the whole-file columns as the part arrives (``Assembly``,
  while later pieces are still being read) and then dropped, so the peak is the columns plus a
  part, not twice the columns; the freed pages are handed back to the system at the end
  (``release_freed_memory``).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cuda_tracer.model.events import COLUMNS, EventBatch


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
        self.strings: list[str] = []
        self.index: dict[str, int] = {}
        # the side tables of the parts copied: whole-file rows, order codes, local keys, parts, values
        self.side: tuple[list[np.ndarray], ...] = ([], [], [], [])
        self.values: list[Any] = []

    def intern(self, s: str) -> int:
        i = self.index.get(s)
        if i is None:
            i = self.index[s] = len(self.strings)
            self.strings.append(s)
        return i

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
        rows, order, keys, of_part = self.side
        rows.append(np.asarray(part.extra_row, np.int64) + self.rows)
        order.append(np.asarray(part.extra_order, np.int64))
        keys.append(np.asarray(part.extra_key, np.int64))
        of_part.append(np.full(len(part.extra_row), at, np.int64))
        self.values += part.extra_value
        part.extra_row, part.extra_order, part.extra_key, part.extra_value = [], [], [], []
        self.rows = end

    def join(self) -> tuple[EventBatch, Part]:
        """The batch of every part added, and the merged per-file facts (see ``assemble``)."""
        parts = self.parts
        facts = Part(columns={}, strings=[], names=0)
        for p in parts:
            facts.processes.update(p.processes)
            facts.threads.update(p.threads)
            facts.flows += p.flows
            facts.skipped += p.skipped
            if facts.window is None:
                facts.window = p.window
        if len(parts) == 1:
            return _single(parts.pop()), facts
        # side table: global rows, then the whole-file order (order code, row; stable within a row)
        rows, order, local_keys, part_of = (np.concatenate(pieces) for pieces in self.side)
        values = self.values
        sort = np.lexsort((rows, order)) if len(rows) else np.zeros(0, np.int64)
        width = max(len(p.strings) for p in parts) + 1
        code = part_of[sort] * width + local_keys[sort]  # (part, local key) of each entry, in order
        distinct, first = np.unique(code, return_index=True)
        remaps = self.remaps
        for c in distinct[np.argsort(first)].tolist():  # keys interned in order of first use
            p, k = divmod(c, width)
            if remaps[p][k] < 0:
                remaps[p][k] = self.intern(parts[p].strings[k])
        flat = np.concatenate(remaps)
        starts = np.cumsum([0] + [len(r) for r in remaps[:-1]])
        keys = flat[starts[part_of[sort]] + local_keys[sort]].astype(np.int32)
        for column in self.columns.values():
            if self.capacity > self.rows:
                column.resize(self.rows, refcheck=False)  # the unused rows handed back
        if self.rows >= TRIM_ROWS:
            release_freed_memory()  # the parts' copies, in the C heap's holes: back to the system
        batch = EventBatch(self.columns, self.strings, rows[sort], keys,
                           list(map(values.__getitem__, sort.tolist())))
        self.parts, self.columns, self.values = [], {}, []
        return batch, facts


def _single(p: Part) -> EventBatch:
    """The batch of a file read as one part: its names are in whole-file order already."""
    rows = np.asarray(p.extra_row, np.int64)
    sort = np.lexsort((rows, np.asarray(p.extra_order, np.int64))) if len(rows) else rows
    return EventBatch(p.columns, p.strings, rows[sort], np.asarray(p.extra_key, np.int32)[sort],
                      list(map(p.extra_value.__getitem__, sort.tolist())))
