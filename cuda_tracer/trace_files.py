"""Reads Kineto / Chrome trace JSON files (``.json`` or ``.json.gz``) into an ``EventBatch``.

Covers every generation of the PyTorch profiler's output: the 2021 categories (``Kernel``,
``Runtime``, ``Memcpy``, ``Memset``, ``Operator``, ``external id``), the current ones (``kernel``,
``cuda_runtime``, ``cuda_driver``, ``gpu_memcpy``, ``gpu_memset``, ``cuda_sync``, ...), integer-µs
timestamps and ns-resolution decimal timestamps relative to ``baseTimeNanoseconds``, ROCm ``hip*``
launches and CPU-only traces.

The file is decoded against a typed schema of only the fields we use (msgspec), so unknown fields are
skipped while parsing instead of becoming Python objects. Timestamps are decoded as ``Decimal`` so that
``"1712195495519695.8"`` µs becomes exactly ``1712195495519695800`` ns (a float would be 50 ns off).
"""

from __future__ import annotations

import gzip
import os
import re
import zlib
from itertools import repeat
from operator import attrgetter, is_, is_not
from decimal import Decimal, InvalidOperation
from typing import Any

import msgspec

import numpy as np

from .events import (COLUMNS, MISSING, EventBatch, Kind, memcpy_kind_from_name,
                     sync_kind_from_name)
from .profile import Profile, RankProfile, TraceError


class _Args(msgspec.Struct, gc=False):
    external_id: Any = msgspec.field(default=MISSING, name="External id")
    external_id_legacy: Any = msgspec.field(default=MISSING, name="external id")
    correlation: Any = MISSING
    device: Any = MISSING
    stream: Any = MISSING
    bytes: Any = None
    grid: Any = None
    block: Any = None
    registers: Any = msgspec.field(default=MISSING, name="registers per thread")
    shared_memory: Any = msgspec.field(default=MISSING, name="shared memory")
    graph_id: Any = msgspec.field(default=MISSING, name="graph id")
    sync_kind: Any = msgspec.field(default=None, name="cuda_sync_kind")
    wait_on_stream: Any = None
    wait_on_event_record: Any = msgspec.field(default=None, name="wait_on_cuda_event_record_corr_id")
    wait_on_event_id: Any = msgspec.field(default=None, name="wait_on_cuda_event_id")
    # [memory] instant events
    mem_bytes: Any = msgspec.field(default=MISSING, name="Bytes")
    mem_device_id: Any = msgspec.field(default=MISSING, name="Device Id")
    mem_device_type: Any = msgspec.field(default=None, name="Device Type")
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=None, name="Total Reserved")
    # collectives (record_param_comms and NCCL kernels)
    collective: Any = msgspec.field(default=None, name="Collective name")
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    group_size: Any = msgspec.field(default=None, name="Group size")
    dtype: Any = None
    # "M" metadata events (process_name, thread_name)
    name: Any = None


class _Event(msgspec.Struct, gc=False):
    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = MISSING
    tid: Any = MISSING
    ts: int | Decimal | None = None
    dur: int | Decimal | None = 0
    args: _Args | None = None


class _TraceFile(msgspec.Struct, gc=False):
    traceEvents: list[_Event] | None = None
    schemaVersion: Any = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    baseTimeNanoseconds: Any = None
    cupti_version: Any = None
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None
    trace_id: Any = None
    host_name: Any = None
    record_shapes: Any = None
    with_stack: Any = None
    profile_memory: Any = None


_KIND_BY_CATEGORY = {
    "kernel": Kind.KERNEL,
    "gpu_memcpy": Kind.MEMCPY, "memcpy": Kind.MEMCPY,
    "gpu_memset": Kind.MEMSET, "memset": Kind.MEMSET,
    "cuda_sync": Kind.SYNC,
    "cuda_runtime": Kind.RUNTIME, "runtime": Kind.RUNTIME, "xpu_runtime": Kind.RUNTIME,
    "privateuse1_runtime": Kind.RUNTIME,
    "cuda_driver": Kind.DRIVER, "xpu_driver": Kind.DRIVER, "privateuse1_driver": Kind.DRIVER,
    "cpu_op": Kind.CPU_OP, "operator": Kind.CPU_OP,
    "user_annotation": Kind.USER_ANNOTATION,
    "gpu_user_annotation": Kind.GPU_USER_ANNOTATION,
    "python_function": Kind.PYTHON_FUNCTION,
    "overhead": Kind.OVERHEAD,
    "trace": Kind.PROFILER,
}

_KIND_BY_RAW_CATEGORY = {**_KIND_BY_CATEGORY,
                         **{c.capitalize(): k for c, k in _KIND_BY_CATEGORY.items()}}
_STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
_RANK_IN_FILENAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
_GPU_KIND_CODES = np.array([Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.SYNC, Kind.GPU_USER_ANNOTATION],
                           dtype=np.uint8)
_DECODER = msgspec.json.Decoder(_TraceFile | list[_Event])
_TRACE_SUFFIXES = (".json", ".json.gz")


def is_trace_file(path: str) -> bool:
    return path.endswith(_TRACE_SUFFIXES)


def read_bytes(path: str) -> bytes:
    """The file's JSON text, gunzipped when it is gzip (by content, not by name)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise TraceError(path, "no such file") from None
    except IsADirectoryError:
        raise TraceError(path, "is a directory") from None
    except OSError as exc:
        raise TraceError(path, f"cannot read ({exc.strerror or exc})") from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (EOFError, zlib.error, gzip.BadGzipFile, OSError) as exc:
            raise TraceError(path, f"corrupt or truncated gzip data ({exc})") from None
    if not data or data.isspace():
        raise TraceError(path, "empty file")
    return data


def read_trace(path: str) -> RankProfile:
    """Read one Kineto/Chrome trace file into a ``RankProfile``. Raises ``TraceError``."""
    data = read_bytes(path)
    try:
        doc = _DECODER.decode(data)
    except msgspec.ValidationError as exc:
        raise TraceError(path, f"not a Chrome/Kineto trace ({exc})") from None
    except msgspec.DecodeError as exc:
        raise TraceError(path, f"invalid JSON ({exc})") from None
    del data
    if isinstance(doc, list):
        doc = _TraceFile(traceEvents=doc)
    if doc.traceEvents is None:
        raise TraceError(path, "not a Chrome/Kineto trace (no 'traceEvents' list)")
    return _convert(path, doc)


# ---------------------------------------------------------------------------- decoded events
# Public names for sources that already hold Kineto-shaped events (the live Kineto source): they build
# ``TraceEvent``s and convert them with ``events_to_profile``, the same conversion a file goes through.
TraceEvent = _Event
"""One Chrome/Kineto trace event: ``ph``, ``cat``, ``name``, ``pid``, ``tid``, ``ts``/``dur`` (µs), ``args``."""
TraceArgs = _Args
"""The ``args`` of a ``TraceEvent``: the Kineto fields the reader uses (correlation, stream, bytes, ...)."""
_ARGS_DECODER = msgspec.json.Decoder(_Args)


def decode_args(text: str | bytes) -> TraceArgs:
    """``TraceArgs`` from a JSON object's text (``{...}``); empty ``TraceArgs`` when it is not valid."""
    try:
        return _ARGS_DECODER.decode(text) if text else _Args()
    except msgspec.MsgspecError:
        return _Args()


def events_to_profile(events: list[TraceEvent], base_ns: int = 0, source: str = "<events>",
                      unit: str = "us") -> RankProfile:
    """Already-decoded events to a ``RankProfile``, exactly as ``read_trace`` converts a file's.

    ``ts``/``dur`` are in ``unit`` ("us" as in files: ``int`` or exact ``Decimal``; "ns": integers,
    as live sources have them) relative to ``base_ns`` (the file format's ``baseTimeNanoseconds``);
    ``source`` names the events in errors and in ``meta["source"]``. Raises ``TraceError`` when
    ``base_ns`` is not a plausible time.
    """
    return _convert(source, _TraceFile(traceEvents=list(events), baseTimeNanoseconds=base_ns),
                    ns_per_unit=_NS_PER_UNIT[unit])


def _int(value: Any, default: int = MISSING) -> int:
    """An integer from a JSON value that may be an int, a float, a numeric or hex string, or junk."""
    if value is None or isinstance(value, bool):
        return default
    try:
        if type(value) is not int:
            value = (int(value, 0) if value[:2].lower() == "0x" else int(float(value))
                     if isinstance(value, str) else int(value))
    except (ValueError, OverflowError, TypeError):
        return default
    return value if -2**63 <= value < 2**63 else default


def _base_ns(doc: _TraceFile, path: str) -> int:
    base = doc.baseTimeNanoseconds
    if base is None:
        return 0
    value = _int(base, default=-2)
    if not 0 <= value < _TIME_LIMIT_NS:
        raise TraceError(path, f"baseTimeNanoseconds is not a plausible integer: {base!r}")
    return value


def _ints(values: list[Any]) -> np.ndarray:
    """An int64 column from JSON values; None, junk and out-of-range numbers become MISSING.

    Integer-valued fields default to MISSING in the schema, so the common case is one C-level
    conversion; anything else (null, hex or label strings, huge numbers) takes the careful path.
    """
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        pass
    fixed = list(values)
    is_int = np.fromiter(map(isinstance, values, repeat(int)), bool, len(values))
    for i in np.flatnonzero(~is_int).tolist():  # labels, hex strings, floats, None: usually few
        fixed[i] = _int(fixed[i])
    try:
        return np.array(fixed, dtype=np.int64)
    except OverflowError:  # an integer beyond int64
        return np.array([_int(v) for v in fixed], dtype=np.int64)


_NS_PER_UNIT = {"us": 1000, "ns": 1}


def _to_ns(values: list[Any], ns_per_unit: int) -> np.ndarray:
    """Exact integer ns from decimal values in a unit (ints take a vectorised path, Decimals an
    exact one)."""
    if set(map(type, values)) <= {int}:
        counts = np.array(values, dtype=np.int64)
        if len(counts) and np.abs(counts).max() >= _TIME_LIMIT_NS // ns_per_unit:
            raise OverflowError("timestamp out of range")
        return counts * ns_per_unit
    ns = [int(v * ns_per_unit) for v in values]
    if ns and max(map(abs, ns)) >= _TIME_LIMIT_NS:
        raise OverflowError("timestamp out of range")
    return np.array(ns, dtype=np.int64)


_EMPTY_ARGS = _Args()


def _convert(path: str, doc: _TraceFile, ns_per_unit: int = 1000) -> RankProfile:
    base_ns = _base_ns(doc, path)
    processes: dict[str, str] = {}
    threads: dict[str, str] = {}
    all_events = doc.traceEvents
    n_all = len(all_events)
    ph = _phase_codes(all_events)
    span = (ph == _PHASE_CODE["X"]) | (ph == _PHASE_CODE["i"]) | (ph == _PHASE_CODE["I"])
    usable = span & np.fromiter(map(isinstance, map(attrgetter("name"), all_events), repeat(str)),
                                bool, n_all)
    usable &= ~np.fromiter(map(is_, map(attrgetter("ts"), all_events), repeat(None)), bool, n_all)
    flows = int(np.isin(ph, [_PHASE_CODE[p] for p in "sft"]).sum())
    metadata = np.flatnonzero(ph == _PHASE_CODE["M"])
    skipped = n_all - int(usable.sum()) - flows - len(metadata)
    for i in metadata.tolist():
        e = all_events[i]
        if e.args is not None and isinstance(e.args.name, str):
            if e.name == "process_name":
                processes[str(e.pid)] = e.args.name
            elif e.name == "thread_name":
                threads[f"{e.pid}/{e.tid}"] = e.args.name
    events: list[_Event] = [all_events[i] for i in np.flatnonzero(usable).tolist()]
    phases = ph[usable]

    # Times: exact decimal µs -> integer ns. Rows with unusable times are dropped (and counted).
    try:
        start, dur = _times(events, phases, base_ns, ns_per_unit)
    except (InvalidOperation, OverflowError, ValueError):
        ok = np.array([_usable_time(e, ns_per_unit) for e in events], dtype=bool)
        skipped += int((~ok).sum())
        events = [e for e, good in zip(events, ok.tolist()) if good]
        phases = phases[ok]
        start, dur = _times(events, phases, base_ns, ns_per_unit)
    good = dur >= 0
    if not good.all():
        skipped += int((~good).sum())
        keep = np.flatnonzero(good)
        events = [events[i] for i in keep.tolist()]
        start, dur, phases = start[keep], dur[keep], phases[keep]

    names = list(map(attrgetter("name"), events))
    index: dict[str, int] = dict.fromkeys(names)  # first-seen order, one entry per distinct name
    for i, name in enumerate(index):
        index[name] = i
    name_ids = np.fromiter(map(index.__getitem__, names), np.int32, len(names))
    strings = list(index)
    kinds = _kinds(events, phases, name_ids, index)
    steps = _step_numbers(kinds, name_ids, strings)
    kinds[list(steps)] = Kind.STEP

    n = len(events)
    col = {c: np.full(n, MISSING, dt) for c, dt in COLUMNS.items() if dt.kind == "i"}
    col["kind"], col["name"], col["start_ns"], col["end_ns"] = kinds, name_ids, start, start + dur
    col["subkind"] = np.zeros(n, np.uint8)
    gpu = np.isin(kinds, _GPU_KIND_CODES)
    args = [_EMPTY_ARGS if a is None else a for a in map(attrgetter("args"), events)]

    def arg_column(name: str) -> np.ndarray:
        return _ints(list(map(attrgetter(name), args)))

    pids = _ints(list(map(attrgetter("pid"), events)))
    tids = _ints(list(map(attrgetter("tid"), events)))
    devices, streams = arg_column("device"), arg_column("stream")
    # GPU rows: device/stream from args, else from the pid/tid Kineto files them under.
    col["device"] = np.where(gpu, np.where(devices != MISSING, devices, pids), MISSING)
    col["stream"] = np.where(gpu, np.where(streams != MISSING, streams, tids), MISSING)
    col["pid"] = np.where(gpu, MISSING, pids)
    col["tid"] = np.where(gpu, MISSING, tids)
    external, legacy = arg_column("external_id"), arg_column("external_id_legacy")
    col["external_id"] = np.where(external != MISSING, external, legacy)
    col["correlation"] = arg_column("correlation")

    extra = _Extras(index, strings)
    for i, number in steps.items():
        extra.add(i, "step", number)
    for i in np.flatnonzero(kinds == Kind.PROFILER)[:1].tolist():
        window = [int(start[i]), int(start[i] + dur[i])]
        break
    else:
        window = None
    kernels = np.flatnonzero(kinds == Kind.KERNEL)
    kernel_args = [args[i] for i in kernels.tolist()]
    for axis, attr in (("grid", "grid"), ("block", "block")):
        triples = _int_triples(list(map(attrgetter(attr), kernel_args)))
        for j, xyz in enumerate("xyz"):
            col[f"{axis}_{xyz}"][kernels] = triples[:, j]
    for column, attr in (("registers", "registers"), ("shared_mem", "shared_memory"),
                         ("graph_id", "graph_id")):
        col[column][kernels] = _ints(list(map(attrgetter(attr), kernel_args)))
    transfers = np.flatnonzero((kinds == Kind.MEMCPY) | (kinds == Kind.MEMSET))
    col["bytes"][transfers] = _ints([args[i].bytes for i in transfers.tolist()])
    memcpy = np.flatnonzero(kinds == Kind.MEMCPY)
    direction = {n: memcpy_kind_from_name(strings[n]) for n in np.unique(name_ids[memcpy]).tolist()}
    col["subkind"][memcpy] = [direction[n] for n in name_ids[memcpy].tolist()]
    for i in np.flatnonzero(kinds == Kind.SYNC).tolist():
        e, a = events[i], events[i].args
        sk = a.sync_kind if a is not None else None
        col["subkind"][i] = sync_kind_from_name(sk if isinstance(sk, str) else e.name)
        if a is not None:
            extra.add_int(i, "wait_on_stream", a.wait_on_stream)
            extra.add_int(i, "wait_on_event_record_correlation", a.wait_on_event_record)
            extra.add_int(i, "wait_on_event_id", a.wait_on_event_id)
    memory = np.flatnonzero(kinds == Kind.MEMORY)
    memory_args = [args[i] for i in memory.tolist()]
    col["bytes"][memory] = _ints(list(map(attrgetter("mem_bytes"), memory_args)))
    col["device"][memory] = _ints(list(map(attrgetter("mem_device_id"), memory_args)))
    for key, attr in (("total_allocated", "total_allocated"), ("total_reserved", "total_reserved"),
                      ("device_type", "mem_device_type")):
        extra.add_ints(memory, key, list(map(attrgetter(attr), memory_args)))
    collectives = list(map(attrgetter("collective"), args))
    for i in np.flatnonzero(np.fromiter(map(is_not, collectives, repeat(None)), bool,
                                        len(collectives))).tolist():
        value, a = collectives[i], args[i]
        if isinstance(value, str):
            extra.add(i, "collective", value)
            extra.add_int(i, "in_nelems", a.in_nelems)
            extra.add_int(i, "out_nelems", a.out_nelems)
            extra.add_int(i, "group_size", a.group_size)
            if isinstance(a.dtype, str):
                extra.add(i, "dtype", a.dtype)
    for i in np.flatnonzero(kinds == Kind.OTHER).tolist():
        if isinstance(events[i].cat, str):
            extra.add(i, "category", events[i].cat.lower())

    batch = EventBatch(_typed(col), extra.strings, np.asarray(extra.rows, np.int64),
                       np.asarray(extra.keys, np.int32), extra.values)
    dist = doc.distributedInfo if isinstance(doc.distributedInfo, dict) else {}
    rank = _int(dist.get("rank"), default=MISSING)
    if rank == MISSING:
        m = _RANK_IN_FILENAME.search(os.path.basename(path))
        rank = int(m.group(1)) if m else MISSING
    world_size = _int(dist.get("world_size"), default=MISSING)
    meta = {
        "source": os.path.basename(path),
        "format": "kineto",
        "rank": rank,
        "world_size": world_size,
        "distributed": {k: v for k, v in dist.items() if k != "pg_config"},
        "device_properties": doc.deviceProperties if isinstance(doc.deviceProperties, list) else [],
        "versions": {k: v for k, v in (("cupti", doc.cupti_version),
                                       ("cuda_runtime", doc.cuda_runtime_version),
                                       ("cuda_driver", doc.cuda_driver_version),
                                       ("schema", doc.schemaVersion)) if v is not None},
        "host_name": doc.host_name if isinstance(doc.host_name, str) else None,
        "processes": processes,
        "threads": threads,
        "profiler_window_ns": list(window) if window else None,
        "flow_events": flows,
        "skipped_events": skipped,
    }
    if len(batch):
        batch.columns["rank"][:] = rank
    return RankProfile(meta=meta, batch=batch)


def _int_triples(values: list[Any]) -> np.ndarray:
    """An (n, 3) int64 array from [x, y, z] lists; anything else becomes MISSING."""
    try:
        out = np.array(values, dtype=np.int64)
        if out.shape == (len(values), 3):
            return out
    except (TypeError, ValueError, OverflowError):
        pass
    return _ints([v for value in values for v in _triple(value)]).reshape(-1, 3)


def _triple(value: Any) -> tuple:
    return tuple(value) if isinstance(value, list) and len(value) == 3 else (None, None, None)


_PHASE_CODE = {p: i for i, p in enumerate("XiIMsftBEC", start=1)}  # 0: anything else


def _phase_codes(events: list[_Event]) -> np.ndarray:
    phases = list(map(attrgetter("ph"), events))
    try:
        return np.fromiter(map(_PHASE_CODE.get, phases, repeat(0)), np.uint8, len(phases))
    except TypeError:  # an unhashable phase value
        return np.array([_PHASE_CODE.get(p, 0) if isinstance(p, str) else 0 for p in phases],
                        np.uint8)


def _kinds(events: list[_Event], phases: np.ndarray, name_ids: np.ndarray,
           index: dict[str, int]) -> np.ndarray:
    """Kind of each event: from the category for complete ("X") events, else instant or memory."""
    cats = list(map(attrgetter("cat"), events))
    try:
        kinds = np.fromiter(map(_KIND_BY_RAW_CATEGORY.get, cats, repeat(0)), np.uint8, len(cats))
    except TypeError:  # an unhashable category (a list, an object): take the careful path
        kinds = np.zeros(len(cats), np.uint8)
    complete = phases == _PHASE_CODE["X"]
    for i in np.flatnonzero((kinds == 0) & complete).tolist():
        c = cats[i]
        kinds[i] = _KIND_BY_CATEGORY.get(c.lower(), Kind.OTHER) if isinstance(c, str) else Kind.OTHER
    kinds[~complete] = Kind.INSTANT
    kinds[~complete & (name_ids == index.get("[memory]", -1))] = Kind.MEMORY
    return kinds


def _step_numbers(kinds: np.ndarray, name_ids: np.ndarray, strings: list[str]) -> dict[int, int]:
    """Row -> step number for ``ProfilerStep#N`` annotations (or ops, in old traces)."""
    numbers = {i: int(m.group(1)) for i, m in enumerate(map(_STEP_NAME.match, strings)) if m}
    if not numbers:
        return {}
    rows = np.flatnonzero(np.isin(name_ids, list(numbers)) &
                          ((kinds == Kind.USER_ANNOTATION) | (kinds == Kind.CPU_OP)))
    return {row: numbers[name_id] for row, name_id in zip(rows.tolist(), name_ids[rows].tolist())}


def _times(events: list[_Event], phases: np.ndarray, base_ns: int,
           ns_per_unit: int) -> tuple[np.ndarray, np.ndarray]:
    start = _to_ns(list(map(attrgetter("ts"), events)), ns_per_unit) + base_ns
    durs = list(map(attrgetter("dur"), events))  # absent: 0 by the schema; an explicit null: None
    dur = _to_ns(durs if None not in durs else [0 if d is None else d for d in durs], ns_per_unit)
    dur[phases != _PHASE_CODE["X"]] = 0
    return start, dur


_TIME_LIMIT_NS = 2**62  # far beyond any real clock; keeps start + duration inside int64


def _typed(columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Columns in their schema dtype; values that do not fit a narrower column become MISSING."""
    out = {}
    for name, dtype in COLUMNS.items():
        values = columns[name]
        if values.dtype != dtype:
            info = np.iinfo(dtype)
            values = np.where((values < info.min) | (values > info.max), MISSING, values).astype(dtype)
        out[name] = values
    return out


def _usable_time(e: _Event, ns_per_unit: int) -> bool:
    try:
        return (abs(int(e.ts * ns_per_unit)) < _TIME_LIMIT_NS and
                (e.dur is None or abs(int(e.dur * ns_per_unit)) < _TIME_LIMIT_NS))
    except (InvalidOperation, OverflowError, ValueError, TypeError):
        return False


class _Extras:
    """Collects side-table attributes while sharing the batch's string table."""

    def __init__(self, index: dict[str, int], strings: list[str]) -> None:
        self.index, self.strings = index, strings
        self.rows: list[int] = []
        self.keys: list[int] = []
        self.values: list[Any] = []

    def add(self, row: int, key: str, value: Any) -> None:
        k = self.index.get(key)
        if k is None:
            k = self.index[key] = len(self.strings)
            self.strings.append(key)
        self.rows.append(row)
        self.keys.append(k)
        self.values.append(value)

    def add_int(self, row: int, key: str, value: Any) -> None:
        if value is not None:
            self.add(row, key, _int(value))

    def add_ints(self, rows: np.ndarray, key: str, values: list[Any]) -> None:
        """One attribute for many rows at once; rows whose value is None get none."""
        present = [i for i, v in enumerate(values) if v is not None]
        if not present:
            return
        self.add(int(rows[present[0]]), key, _int(values[present[0]]))
        k = self.keys[-1]
        self.rows.extend(rows[present[1:]].tolist())
        self.keys.extend([k] * (len(present) - 1))
        self.values.extend(_ints([values[i] for i in present[1:]]).tolist())
