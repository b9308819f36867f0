"""Turning decoded trace-event fields into typed columns: integers from JSON values of any shape,
exact decimal timestamps to integer ns, launch geometry and ``args`` columns of GPU ops and
``[memory]`` events, and the side table of rare attributes. Every step is a C-level pass per field
(no Python loop per event) except for the rare malformed value."""

from __future__ import annotations

from decimal import Decimal
from itertools import compress, repeat
from operator import attrgetter, is_
from typing import Any, Sequence

import numpy as np

from cuda_tracer.model.events import COLUMNS, MISSING, Kind, sync_kind_from_name
from cuda_tracer.model.string_table import StringTable
from cuda_tracer.trace_json.schema import PHASE_CODE

MAX_STRING_CHARS = 64 << 10
"""Longer strings of a trace are cut to this many characters (``trace_json.files``)."""


def cut_long_strings(values: list | dict, keys: Any) -> int:
    """Cut the strings of ``values`` (a list: all of them; a dict: those at ``keys``) that are
    longer than ``MAX_STRING_CHARS``; returns how many."""
    if isinstance(values, list):  # all of it (a side table holds mostly numbers): C-level passes
        texts: Any = compress(range(len(values)), map(isinstance, values, repeat(str)))
    else:
        texts = [k for k in keys if isinstance(values[k], str)]
    long = [k for k in texts if len(values[k]) > MAX_STRING_CHARS]
    for k in long:
        values[k] = values[k][:MAX_STRING_CHARS]
    return len(long)


def to_int(value: Any, default: int = MISSING) -> int:
    """An integer from a JSON value that may be an int, a float, a numeric or hex string, or junk."""
    if value is None or isinstance(value, bool):
        return default
    try:
        if isinstance(value, str):
            value = int(value, 0) if value[:2].lower() == "0x" else _int_text(value)
        elif type(value) is not int:
            value = int(value)  # a float or Decimal is truncated; a list or object is junk
    except (ArithmeticError, ValueError, TypeError):
        return default
    return value if -2**63 <= value < 2**63 else default


def _int_text(text: str) -> int:
    """An integer's text exactly ("12345678901234567"), else a number's, truncated ("2.5e3")."""
    try:
        return int(text)
    except ValueError:
        return int(float(text))


def ints(values: Sequence[Any]) -> np.ndarray:
    """An int64 column from JSON values; None, junk and out-of-range numbers become MISSING.

    Integer-valued fields default to MISSING in the schema, so the common case is one C-level
    conversion; anything else (null, hex or label strings, huge numbers) takes the careful path.
    """
    try:
        column = np.array(values, dtype=np.int64)
        if column.ndim == 1 and bool not in set(map(type, values)):  # (2-D: lists; a bool: no id)
            return column
    except (TypeError, ValueError, OverflowError):
        pass
    fixed = list(values)
    is_int = np.fromiter(map(is_, map(type, values), repeat(int)), bool, len(values))  # no bool
    for i in np.flatnonzero(~is_int).tolist():  # labels, hex strings, floats, None: usually few
        fixed[i] = to_int(fixed[i])
    try:
        return np.array(fixed, dtype=np.int64)
    except OverflowError:  # an integer beyond int64
        return np.array([to_int(v) for v in fixed], dtype=np.int64)


NS_PER_UNIT = {"us": 1000, "ns": 1}


def to_ns(values: Sequence[Any], ns_per_unit: int) -> np.ndarray:
    """Exact integer ns from decimal values in a unit (ints take a vectorised path, Decimals an
    exact one)."""
    if set(map(type, values)) <= {int}:
        counts = np.array(values, dtype=np.int64)
        if len(counts) and np.abs(counts).max() >= TIME_LIMIT_NS // ns_per_unit:
            raise OverflowError("timestamp out of range")
        return counts * ns_per_unit
    ns = [scaled(v, ns_per_unit) for v in values]
    if ns and max(map(abs, ns)) >= TIME_LIMIT_NS:
        raise OverflowError("timestamp out of range")
    return np.array(ns, dtype=np.int64)


def field_columns(items: list[Any], fields: tuple[str, ...]) -> list[tuple]:
    """One tuple per field holding that field of every struct (one C-level pass per field)."""
    return [tuple(map(attrgetter(field), items)) for field in fields]


def compress_columns(columns: Sequence[Sequence[Any]], keep: np.ndarray) -> list[tuple]:
    mask = keep.tolist()
    return [tuple(compress(c, mask)) for c in columns]


def string_index(names: Sequence[Any]) -> dict[str, int] | None:
    """Each distinct name -> its position in first-seen order (the batch's string table), or None
    when some name is not a string."""
    try:
        index: dict[Any, Any] = dict.fromkeys(names)
    except TypeError:  # an unhashable name (a list, an object)
        return None
    if not all(type(name) is str for name in index):
        return None
    for i, name in enumerate(index):
        index[name] = i
    return index


def string_ids(values: tuple) -> tuple[np.ndarray, list[str]]:
    """Each value's position among the distinct strings (first-seen order), -1 for a value that is
    no string; and those strings."""
    try:
        distinct = dict.fromkeys(values)
    except TypeError:  # an unhashable value (a list, an object): no string either
        values = tuple(v if type(v) is str else None for v in values)
        distinct = dict.fromkeys(values)
    strings = [v for v in distinct if type(v) is str]
    position = {s: i for i, s in enumerate(strings)}
    return np.fromiter(map(position.get, values, repeat(-1)), np.int32, len(values)), strings


def collectives(extra: "Extras", rows: np.ndarray, args: list) -> None:
    """Side-table attributes of the events that name a collective (NCCL kernels, param comms)."""
    names = list(map(attrgetter("collective"), args))
    if names.count(None) == len(names):
        return
    named = np.fromiter(map(isinstance, names, repeat(str)), bool, len(names))
    for j in np.flatnonzero(named).tolist():  # few: the collectives among all events
        i, a = int(rows[j]), args[j]
        extra.add(i, "collective", names[j])
        extra.add_int(i, "in_nelems", a.in_nelems)
        extra.add_int(i, "out_nelems", a.out_nelems)
        extra.add_int(i, "group_size", a.group_size)
        if isinstance(a.dtype, str):
            extra.add(i, "dtype", a.dtype)


def operator_shapes(extra: "Extras", rows: np.ndarray, texts: list[bytes]) -> None:
    """The args of the operators recorded with shapes (``record_shapes``; ``rows[j]``'s args text
    is ``texts[j]``), kept as their JSON text under ``shape_args`` for ``schema.operator_inputs`` to
    decode when an analysis asks: decoding the tens of thousands of a shaped trace here would
    double its read time."""
    for j, text in enumerate(texts):
        if b'"Input Dims"' in text or b'"Input dims"' in text:
            extra.add(int(rows[j]), "shape_args", text.decode("utf-8", "replace"))


def call_stacks(extra: "Extras", rows: np.ndarray, found: list[int], stacks: list[str]) -> None:
    """The ``Call stack`` of the events that recorded one (``with_stack=True`` in older torch):
    ``stacks[k]`` is that of ``rows[found[k]]``."""
    for j, stack in zip(found, stacks):
        extra.add(int(rows[j]), "call_stack", stack)


def gpu_columns(col: dict[str, np.ndarray], extra: "Extras", rows: np.ndarray, args: Any,
                 pids: np.ndarray, tids: np.ndarray, name_ids: np.ndarray, strings: list[str]) -> None:
    """Device, stream, launch geometry, bytes and sync details of the GPU ops at ``rows``; ``args``
    reads their args field by field (``trace_scan.DecodedArgs`` or ``ScannedArgs``, which holds no
    sync op)."""
    kinds = col["kind"][rows]
    devices, streams = args.ints("device"), args.ints("stream")
    # device/stream from args, else from the pid/tid Kineto files GPU ops under.
    col["device"][rows] = np.where(devices != MISSING, devices, pids)
    col["stream"][rows] = np.where(streams != MISSING, streams, tids)
    kernels = np.flatnonzero(kinds == Kind.KERNEL)
    kernel_rows = rows[kernels]
    for axis in ("grid", "block"):
        triples = args.triples(axis, kernels)
        for j, xyz in enumerate("xyz"):
            col[f"{axis}_{xyz}"][kernel_rows] = triples[:, j]
    for column, attr in (("registers", "registers"), ("shared_memory", "shared_memory"),
                         ("graph_id", "graph_id")):
        col[column][kernel_rows] = args.ints(attr, kernels)
    transfers = np.flatnonzero((kinds == Kind.MEMCPY) | (kinds == Kind.MEMSET))
    col["bytes"][rows[transfers]] = args.ints("bytes", transfers)
    extra.step += 1
    for j in np.flatnonzero(kinds == Kind.SYNC).tolist():
        i, a = int(rows[j]), args.items[j]
        sync_kind = a.sync_kind if isinstance(a.sync_kind, str) else strings[name_ids[i]]
        col["subkind"][i] = sync_kind_from_name(sync_kind)
        extra.add_int(i, "wait_on_stream", a.wait_on_stream)
        extra.add_int(i, "wait_on_event_record_correlation", a.wait_on_event_record)
        extra.add_int(i, "wait_on_event_id", a.wait_on_event_id)


def memory_columns(col: dict[str, np.ndarray], extra: "Extras", rows: np.ndarray, args: Any) -> None:
    """Bytes, device and allocator totals of ``[memory]`` events at ``rows``; ``args`` reads their
    args field by field (``trace_scan.DecodedArgs`` or ``ScannedArgs``)."""
    col["bytes"][rows] = args.ints("mem_bytes")
    col["device"][rows] = args.ints("mem_device_id")
    extra.step += 1
    for sub, (key, attr) in enumerate((("total_allocated", "total_allocated"),
                                       ("total_reserved", "total_reserved"),
                                       ("device_type", "mem_device_type"))):
        present, values = args.present_ints(attr)
        extra.add_present(rows, key, present, values, sub)


def int_triples(values: list[Any]) -> np.ndarray:
    """An (n, 3) int64 array from [x, y, z] lists; anything else becomes MISSING."""
    try:
        out = np.array(values, dtype=np.int64)
        if out.shape == (len(values), 3):
            return out
    except (TypeError, ValueError, OverflowError):
        pass
    return ints([v for value in values for v in _triple(value)]).reshape(-1, 3)


def _triple(value: Any) -> tuple:
    return tuple(value) if isinstance(value, list) and len(value) == 3 else (None, None, None)


def times(ts: Sequence[Any], durs: Sequence[Any], phases: np.ndarray, base_ns: int,
           ns_per_unit: int) -> tuple[np.ndarray, np.ndarray]:
    start = to_ns(ts, ns_per_unit) + base_ns
    # durs: absent is 0 by the schema; an explicit null is None
    dur = to_ns(durs if None not in durs else [0 if d is None else d for d in durs], ns_per_unit)
    dur[phases != PHASE_CODE["X"]] = 0
    return start, dur


TIME_LIMIT_NS = 2**62  # far beyond any real clock; keeps start + duration inside int64


def typed(columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Columns in their schema dtype; values that do not fit a narrower column become MISSING."""
    out = {}
    for name, dtype in COLUMNS.items():
        values = columns[name]
        if values.dtype != dtype:
            info = np.iinfo(dtype)
            values = np.where((values < info.min) | (values > info.max), MISSING, values).astype(dtype)
        out[name] = values
    return out


def usable_time(ts: Any, dur: Any, ns_per_unit: int) -> bool:
    try:
        return (abs(scaled(ts, ns_per_unit)) < TIME_LIMIT_NS and
                (dur is None or abs(scaled(dur, ns_per_unit)) < TIME_LIMIT_NS))
    except (ArithmeticError, ValueError, TypeError):
        return False


def scaled(value: Any, ns_per_unit: int) -> int:
    """``value`` in ns, exactly; a decimal exponent far past any clock is refused before ``int()``
    would build a number of a million digits."""
    if type(value) is Decimal and value.is_finite() and value.adjusted() > 20:
        raise OverflowError("timestamp out of range")
    return int(value * ns_per_unit)


class Extras:
    """Collects side-table attributes while sharing the batch's string table (their keys are
    interned in it)."""

    def __init__(self, table: StringTable) -> None:
        self.strings = table.strings
        self.key = table.intern
        self.rows: list[int] = []
        self.keys: list[int] = []
        self.values: list[Any] = []
        self.order: list[int] = []  # the conversion step that added each entry (trace_assemble)
        self.step = 0

    def add(self, row: int, key: str, value: Any) -> None:
        self.rows.append(row)
        self.keys.append(self.key(key))
        self.values.append(value)
        self.order.append(self.step * 8)

    def add_int(self, row: int, key: str, value: Any) -> None:
        if value is not None:
            self.add(row, key, to_int(value))

    def add_present(self, rows: np.ndarray, key: str, present: np.ndarray, values: np.ndarray,
                    sub: int = 0) -> None:
        """One attribute for the ``present`` rows at once (``values``: theirs, in order; the
        ``sub``-th such key of this step)."""
        kept = rows[present].tolist()
        if kept:
            self.rows.extend(kept)
            self.keys.extend([self.key(key)] * len(kept))
            self.values.extend(values.tolist())
            self.order.extend([self.step * 8 + sub] * len(kept))
