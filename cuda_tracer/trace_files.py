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
from operator import attrgetter
from decimal import Decimal, InvalidOperation
from typing import Any

import msgspec

import numpy as np

from .events import (COLUMNS, MISSING, EventBatch, Kind, memcpy_kind_from_name,
                     sync_kind_from_name)
from .profile import Profile, RankProfile, TraceError


class _Args(msgspec.Struct, gc=False):
    external_id: Any = msgspec.field(default=None, name="External id")
    external_id_legacy: Any = msgspec.field(default=None, name="external id")
    correlation: Any = None
    device: Any = None
    stream: Any = None
    bytes: Any = None
    grid: Any = None
    block: Any = None
    registers: Any = msgspec.field(default=None, name="registers per thread")
    shared_memory: Any = msgspec.field(default=None, name="shared memory")
    graph_id: Any = msgspec.field(default=None, name="graph id")
    sync_kind: Any = msgspec.field(default=None, name="cuda_sync_kind")
    wait_on_stream: Any = None
    wait_on_event_record: Any = msgspec.field(default=None, name="wait_on_cuda_event_record_corr_id")
    wait_on_event_id: Any = msgspec.field(default=None, name="wait_on_cuda_event_id")
    # [memory] instant events
    mem_bytes: Any = msgspec.field(default=None, name="Bytes")
    mem_device_id: Any = msgspec.field(default=None, name="Device Id")
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
    pid: Any = None
    tid: Any = None
    ts: int | Decimal | None = None
    dur: int | Decimal | None = None
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
    if not data.strip():
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


def _int(value: Any, default: int = MISSING) -> int:
    """An integer from a JSON value that may be an int, a float, a numeric or hex string, or junk."""
    if type(value) is int:
        return value
    if value is None or isinstance(value, bool):
        return default
    try:
        if isinstance(value, str):
            return int(value, 0) if value[:2].lower() == "0x" else int(float(value))
        return int(value)
    except (ValueError, OverflowError, TypeError):
        return default


def _base_ns(doc: _TraceFile, path: str) -> int:
    base = doc.baseTimeNanoseconds
    if base is None:
        return 0
    value = _int(base, default=-2)
    if value < 0:
        raise TraceError(path, f"baseTimeNanoseconds is not a non-negative integer: {base!r}")
    return value


def _ints(values: list[Any]) -> np.ndarray:
    """An int64 column from JSON values; None, junk and out-of-range numbers become MISSING."""
    try:
        return np.array([v if type(v) is int else _int(v) for v in values], dtype=np.int64)
    except OverflowError:
        return np.array([_int(v) if -2**63 <= _int(v) < 2**63 else MISSING for v in values],
                        dtype=np.int64)


def _micros_to_ns(values: list[Any]) -> np.ndarray:
    """Exact integer ns from decimal µs values (ints take a vectorised path, Decimals an exact one)."""
    if set(map(type, values)) <= {int}:
        return np.array(values, dtype=np.int64) * 1000
    return np.array([int(v * 1000) for v in values], dtype=np.int64)


_EMPTY_ARGS = _Args()


def _convert(path: str, doc: _TraceFile) -> RankProfile:
    base_ns = _base_ns(doc, path)
    processes: dict[str, str] = {}
    threads: dict[str, str] = {}
    flows = skipped = 0
    events: list[_Event] = []
    for e in doc.traceEvents:
        ph = e.ph
        if ph == "X" or ph == "i" or ph == "I":
            if e.ts is None or not isinstance(e.name, str):
                skipped += 1
            else:
                events.append(e)
        elif ph == "M":
            if e.args is not None and isinstance(e.args.name, str):
                if e.name == "process_name":
                    processes[str(e.pid)] = e.args.name
                elif e.name == "thread_name":
                    threads[f"{e.pid}/{e.tid}"] = e.args.name
        elif ph in ("s", "f", "t"):
            flows += 1
        else:
            skipped += 1

    # Times: exact decimal µs -> integer ns. Rows with unusable times are dropped (and counted).
    try:
        start, dur = _times(events, base_ns)
    except (InvalidOperation, OverflowError, ValueError):
        usable = [e for e in events if _usable_time(e)]
        skipped += len(events) - len(usable)
        events = usable
        start, dur = _times(events, base_ns)
    good = dur >= 0
    if not good.all():
        skipped += int((~good).sum())
        keep = np.flatnonzero(good)
        events = [events[i] for i in keep.tolist()]
        start, dur = start[keep], dur[keep]

    index: dict[str, int] = {}
    name_ids = np.array([index.setdefault(e.name, len(index)) for e in events], dtype=np.int32)
    strings = list(index)
    kind_of = _KIND_BY_CATEGORY.get
    kinds = np.array([
        (kind_of(e.cat.lower(), Kind.OTHER) if isinstance(e.cat, str) else Kind.OTHER)
        if e.ph == "X" else (Kind.MEMORY if e.name == "[memory]" else Kind.INSTANT)
        for e in events], dtype=np.uint8)

    # Steps: ProfilerStep#N annotations (or ops, in old traces).
    step_rows, step_numbers = [], []
    for i in np.flatnonzero((kinds == Kind.USER_ANNOTATION) | (kinds == Kind.CPU_OP)).tolist():
        m = _STEP_NAME.match(events[i].name)
        if m:
            step_rows.append(i)
            step_numbers.append(int(m.group(1)))
    kinds[step_rows] = Kind.STEP

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
    for i, number in zip(step_rows, step_numbers):
        extra.add(i, "step", number)
    for i in np.flatnonzero(kinds == Kind.PROFILER)[:1].tolist():
        window = [int(start[i]), int(start[i] + dur[i])]
        break
    else:
        window = None
    for i in np.flatnonzero(kinds == Kind.KERNEL).tolist():
        a = events[i].args
        if a is None:
            continue
        if isinstance(a.grid, list) and len(a.grid) == 3:
            col["grid_x"][i], col["grid_y"][i], col["grid_z"][i] = map(_int, a.grid)
        if isinstance(a.block, list) and len(a.block) == 3:
            col["block_x"][i], col["block_y"][i], col["block_z"][i] = map(_int, a.block)
        col["registers"][i] = _int(a.registers)
        col["shared_mem"][i] = _int(a.shared_memory)
        col["graph_id"][i] = _int(a.graph_id)
    for i in np.flatnonzero((kinds == Kind.MEMCPY) | (kinds == Kind.MEMSET)).tolist():
        e = events[i]
        if e.args is not None:
            col["bytes"][i] = _int(e.args.bytes)
        if kinds[i] == Kind.MEMCPY:
            col["subkind"][i] = memcpy_kind_from_name(e.name)
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
    for i, value in enumerate(map(attrgetter("collective"), args)):
        if isinstance(value, str):
            a = events[i].args
            extra.add(i, "collective", value)
            extra.add_int(i, "in_nelems", a.in_nelems)
            extra.add_int(i, "out_nelems", a.out_nelems)
            extra.add_int(i, "group_size", a.group_size)
            if isinstance(a.dtype, str):
                extra.add(i, "dtype", a.dtype)
    for i in np.flatnonzero(kinds == Kind.OTHER).tolist():
        if isinstance(events[i].cat, str):
            extra.add(i, "category", events[i].cat.lower())

    batch = EventBatch(col, extra.strings, np.asarray(extra.rows, np.int64),
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


def _times(events: list[_Event], base_ns: int) -> tuple[np.ndarray, np.ndarray]:
    start = _micros_to_ns(list(map(attrgetter("ts"), events))) + base_ns
    durs = [0 if d is None else d for d in map(attrgetter("dur"), events)]
    dur = _micros_to_ns(durs)
    dur[np.array([e.ph != "X" for e in events], dtype=bool)] = 0
    return start, dur


def _usable_time(e: _Event) -> bool:
    try:
        int(e.ts * 1000)
        if e.dur is not None:
            int(e.dur * 1000)
        return True
    except (InvalidOperation, OverflowError, ValueError):
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
