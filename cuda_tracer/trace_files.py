"""Reads Kineto / Chrome trace JSON files (``.json`` or ``.json.gz``) into an ``EventBatch``.

Covers every generation of the PyTorch profiler's output: the 2021 categories (``Kernel``,
``Runtime``, ``Memcpy``, ``Memset``, ``Operator``, ``external id``), the current ones (``kernel``,
``cuda_runtime``, ``cuda_driver``, ``gpu_memcpy``, ``gpu_memset``, ``cuda_sync``, ...), integer-µs
timestamps and ns-resolution decimal timestamps relative to ``baseTimeNanoseconds``, ROCm ``hip*``
launches and CPU-only traces.

The text is read as a stream (``trace_stream``): pieces of the event list are decoded against the
typed schema of ``trace_schema`` (only the fields we use, one struct per phase, ``args`` decoded per
kind once the kinds are known) and converted to columns (``convert_part``: a few C-level passes per
field, no Python loop per event, the cycle collector paused); ``trace_assemble`` joins the pieces
in whole-file order. Timestamps are converted from their decimal text (``trace_times``), so that
``"1712195495519695.8"`` µs becomes exactly ``1712195495519695800`` ns (a float would be 50 ns off).
"""

from __future__ import annotations

import gc
import os
import re
import threading
from itertools import repeat
from operator import attrgetter
from typing import Any, Callable

import msgspec

import numpy as np

from .events import COLUMNS, MISSING, Kind, memcpy_kind_from_name
from .profile import RankProfile, TraceError
from .trace_columns import (NS_PER_UNIT, TIME_LIMIT_NS, Extras, call_stacks, collectives, compress_columns,
                            field_columns, gpu_columns, ints, memory_columns, string_index, times,
                            to_int, typed, usable_time)
from .trace_assemble import Part, assemble
from .trace_input import read_text, text_chunks, text_size
from .trace_parallel import MIN_PARALLEL_TEXT, can_fork, read_parallel
from .trace_stream import read_stream
from .trace_times import decimal_ns
from .trace_schema import (GPU_ARGS, HOST_ARGS, MEMORY_ARGS, METADATA_ARGS, PHASE_CODE,
                           Complete, Event, TraceFile, decode_args, phase_codes, time_values)


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
_TRACE_SUFFIXES = (".json", ".json.gz")


def is_trace_file(path: str) -> bool:
    return path.endswith(_TRACE_SUFFIXES)


read_bytes = read_text  # the file's whole JSON text (trace_input)


def read_trace(path: str, max_text_bytes: int | None = None, workers: int = 1,
               progress: Callable[[int], None] | None = None) -> RankProfile:
    """Read one Kineto/Chrome trace file into a ``RankProfile``. Raises ``TraceError``.

    The text is decompressed, split at event boundaries, decoded and converted one piece at a
    time (``trace_stream``), so memory holds the columns and a piece, not the whole file; with
    ``workers`` > 1, a large file's pieces are decoded by that many processes (``trace_parallel``).
    ``max_text_bytes``: the most JSON text a gzip file may decompress to (``trace_input``).
    ``progress``: called with each count of the file's bytes read."""
    chunks = text_chunks(path, max_text_bytes, progress=progress)
    with _COLLECTOR_PAUSED:
        if workers > 1 and can_fork() and text_size(path) >= MIN_PARALLEL_TEXT:
            doc, parts = read_parallel(path, chunks, workers)
        else:
            parts = []
            doc = read_stream(path, chunks, lambda events: parts.append(convert_part(events)))
        return finish(path, doc, parts)


class _CollectorPause:
    """Pauses Python's cycle collector while files are converted: reading allocates a few hundred
    thousand containers and frees none of them, so every collection it would trigger (several full
    ones on a large trace, each walking everything alive) is wasted time. Readers in several threads
    share one pause; the last one out restores the collector as the first one found it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._readers = 0
        self._was_enabled = False

    def __enter__(self) -> None:
        with self._lock:
            if self._readers == 0:
                self._was_enabled = gc.isenabled()
                gc.disable()
            self._readers += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._readers -= 1
            if self._readers == 0 and self._was_enabled:
                gc.enable()


_COLLECTOR_PAUSED = _CollectorPause()


# ---------------------------------------------------------------------------- decoded events
# Public names for sources that already hold Kineto-shaped events (the live Kineto source): they build
# ``TraceEvent``s and convert them with ``events_to_profile``, the same conversion a file goes through.
TraceEvent = Complete
"""One complete ("X") Chrome/Kineto trace event: ``cat``, ``name``, ``pid``, ``tid``, ``ts``/``dur``
(µs), ``args`` (a ``msgspec.Raw`` holding the JSON object's text, as in a file)."""


def events_to_profile(events: list[TraceEvent], base_ns: int = 0, source: str = "<events>",
                      unit: str = "us") -> RankProfile:
    """Already-decoded events to a ``RankProfile``, exactly as ``read_trace`` converts a file's.

    ``ts``/``dur`` are in ``unit`` ("us" as in files: ``int`` or exact ``Decimal``; "ns": integers,
    as live sources have them) relative to ``base_ns`` (the file format's ``baseTimeNanoseconds``);
    ``source`` names the events in errors and in ``meta["source"]``. Raises ``TraceError`` when
    ``base_ns`` is not a plausible time.
    """
    ns_per_unit = NS_PER_UNIT[unit]
    doc = TraceFile(traceEvents=[], baseTimeNanoseconds=base_ns)
    return finish(source, doc, [convert_part(list(events), ns_per_unit)])


def _base_ns(doc: TraceFile, path: str) -> int:
    base = doc.baseTimeNanoseconds
    if base is None:
        return 0
    value = to_int(base, default=-2)
    if not 0 <= value < TIME_LIMIT_NS:
        raise TraceError(path, f"baseTimeNanoseconds is not a plausible integer: {base!r}")
    return value


_EVENT_FIELDS = ("cat", "name", "ts", "dur", "pid", "tid", "args")


def finish(path: str, doc: TraceFile, parts: list[Part]) -> RankProfile:
    """The rank of a file whose events were converted into ``parts``; ``doc`` holds the file's
    other fields (and possibly its last events, converted here)."""
    base_ns = _base_ns(doc, path)
    if doc.traceEvents:
        parts.append(convert_part(doc.traceEvents))
        doc.traceEvents = None
    if not parts:
        parts.append(convert_part([]))
    batch, facts = assemble(parts)
    if len(batch):
        batch.columns["start_ns"] += base_ns
        batch.columns["end_ns"] += base_ns
    window = facts.window and [facts.window[0] + base_ns, facts.window[1] + base_ns]
    meta = _file_meta(path, doc)
    meta.update(processes=facts.processes, threads=facts.threads, profiler_window_ns=window,
                flow_events=facts.flows, skipped_events=facts.skipped)
    if len(batch):
        batch.columns["rank"][:] = meta["rank"]
    return RankProfile(meta=meta, batch=batch)


def convert_part(all_events: list[Any], ns_per_unit: int = 1000) -> Part:
    """Decoded events to columns (times relative to the file's base). Each step is one C-level pass
    per field over all events; the rare malformed event (no name, unusable time) is dropped and
    counted in ``skipped``."""
    base_ns = 0
    ph = phase_codes(all_events)
    span = (ph == PHASE_CODE["X"]) | (ph == PHASE_CODE["i"]) | (ph == PHASE_CODE["I"])
    flows = int(np.isin(ph, [PHASE_CODE[p] for p in "sft"]).sum())
    metadata = np.flatnonzero(ph == PHASE_CODE["M"]).tolist()
    processes, threads = _process_and_thread_names([all_events[i] for i in metadata])
    events = list(map(all_events.__getitem__, np.flatnonzero(span).tolist()))
    phases = ph[span]
    skipped = len(all_events) - len(events) - flows - len(metadata)

    fields = field_columns(events, _EVENT_FIELDS)
    index = string_index(fields[1])
    if index is None:  # an event without a string name is unusable
        named = np.fromiter(map(isinstance, fields[1], repeat(str)), bool, len(phases))
        skipped += int((~named).sum())
        fields, phases = compress_columns(fields, named), phases[named]
    # Times: exact decimal µs -> integer ns, all at once from the text when they are plain decimals
    # within range, else value by value. Rows with unusable times are dropped (and counted).
    try:
        fast = raw_times(fields[2], fields[3], phases, ns_per_unit)
        if fast is None:
            fields[2], fields[3] = time_values(fields[2]), time_values(fields[3])
            fast = times(fields[2], fields[3], phases, base_ns, ns_per_unit)
        start, dur = fast
    except (ArithmeticError, ValueError, TypeError):  # decimal errors are ArithmeticErrors
        good = np.fromiter(map(usable_time, fields[2], fields[3], repeat(ns_per_unit)), bool,
                           len(phases))
        skipped += int((~good).sum())
        fields, phases, index = compress_columns(fields, good), phases[good], None
        start, dur = times(fields[2], fields[3], phases, base_ns, ns_per_unit)
    good = dur >= 0
    if not good.all():
        skipped += int((~good).sum())
        fields, phases, start, dur = compress_columns(fields, good), phases[good], start[good], dur[good]
        index = None
    cats, names, _, _, pids, tids, raw_args = fields
    if index is None:
        index = string_index(names)
    name_ids = np.fromiter(map(index.__getitem__, names), np.int32, len(names))
    strings = list(index)
    kinds = _kinds(cats, phases, name_ids, index)
    steps = _step_numbers(kinds, name_ids, strings)
    kinds[list(steps)] = Kind.STEP

    n = len(names)
    col = {c: np.full(n, MISSING, dt) for c, dt in COLUMNS.items() if dt.kind == "i"}
    col["kind"], col["name"], col["start_ns"], col["end_ns"] = kinds, name_ids, start, start + dur
    col["subkind"] = np.zeros(n, np.uint8)
    pids, tids = ints(pids), ints(tids)
    names_count = len(strings)
    extra = Extras(index, strings)
    for i, number in steps.items():
        extra.add(i, "step", number)
    gpu = _arg_columns(col, extra, raw_args, pids, tids, names)
    col["pid"] = np.where(gpu, MISSING, pids)
    col["tid"] = np.where(gpu, MISSING, tids)
    memcpy = np.flatnonzero(kinds == Kind.MEMCPY)
    direction = {n: memcpy_kind_from_name(strings[n]) for n in set(name_ids[memcpy].tolist())}
    col["subkind"][memcpy] = [direction[n] for n in name_ids[memcpy].tolist()]
    extra.step = 40
    for i in np.flatnonzero(kinds == Kind.OTHER).tolist():
        if isinstance(cats[i], str):
            extra.add(i, "category", cats[i].lower())
    window = None
    for i in np.flatnonzero(kinds == Kind.PROFILER)[:1].tolist():
        window = [int(start[i]), int(start[i] + dur[i])]
    return Part(typed(col), extra.strings, names_count, extra.rows, extra.keys, extra.values,
                extra.order, processes, threads, flows, skipped, window)


def _arg_columns(col: dict[str, np.ndarray], extra: "Extras", raw_args: tuple, pids: np.ndarray,
                 tids: np.ndarray, names: tuple) -> np.ndarray:
    """Every column that comes from ``args``, one batched decode per group of kinds (GPU ops,
    ``[memory]`` events, the rest). Returns which rows are GPU-side."""
    kinds = col["kind"]
    gpu = np.isin(kinds, _GPU_KIND_CODES)
    memory = kinds == Kind.MEMORY
    groups = ((np.flatnonzero(gpu), GPU_ARGS), (np.flatnonzero(memory), MEMORY_ARGS),
              (np.flatnonzero(~gpu & ~memory), HOST_ARGS))
    for group, (rows, decoder) in enumerate(groups, 1):
        extra.step = 10 * group  # the order of side-table entries (trace_assemble)
        args = decode_args(raw_args, rows, decoder)
        external, legacy, correlation = (ints(list(map(attrgetter(field), args))) for field in
                                         ("external_id", "external_id_legacy", "correlation"))
        col["external_id"][rows] = np.where(external != MISSING, external, legacy)
        col["correlation"][rows] = correlation
        collectives(extra, rows, args)
        if decoder is HOST_ARGS:
            call_stacks(extra, rows, args)
        if decoder is GPU_ARGS:
            gpu_columns(col, extra, rows, args, pids[rows], tids[rows], names)
        elif decoder is MEMORY_ARGS:
            memory_columns(col, extra, rows, args)
    return gpu


def _file_meta(path: str, doc: TraceFile) -> dict[str, Any]:
    """The file-level metadata: source, rank and world size (``distributedInfo``, else a
    ``rank-N`` in the file name), device properties, versions, host."""
    dist = doc.distributedInfo if isinstance(doc.distributedInfo, dict) else {}
    rank = to_int(dist.get("rank"), default=MISSING)
    if rank == MISSING:
        m = _RANK_IN_FILENAME.search(os.path.basename(path))
        rank = int(m.group(1)) if m else MISSING
    return {
        "source": os.path.basename(path),
        "format": "kineto",
        "rank": rank,
        "world_size": to_int(dist.get("world_size"), default=MISSING),
        "distributed": {k: v for k, v in dist.items() if k != "pg_config"},
        "device_properties": doc.deviceProperties if isinstance(doc.deviceProperties, list) else [],
        "versions": {k: v for k, v in (("cupti", doc.cupti_version),
                                       ("cuda_runtime", doc.cuda_runtime_version),
                                       ("cuda_driver", doc.cuda_driver_version),
                                       ("schema", doc.schemaVersion)) if v is not None},
        "host_name": doc.host_name if isinstance(doc.host_name, str) else None,
    }


def _process_and_thread_names(metadata: list[Event]) -> tuple[dict[str, str], dict[str, str]]:
    """``process_name`` / ``thread_name`` from ``"M"`` events, keyed "pid" and "pid/tid"."""
    processes: dict[str, str] = {}
    threads: dict[str, str] = {}
    for e in metadata:
        try:
            name = METADATA_ARGS.decode(e.args).name
        except (msgspec.MsgspecError, TypeError):
            continue
        if isinstance(name, str):
            if e.name == "process_name":
                processes[str(e.pid)] = name
            elif e.name == "thread_name":
                threads[f"{e.pid}/{e.tid}"] = name
    return processes, threads


def _kinds(cats: tuple, phases: np.ndarray, name_ids: np.ndarray,
           index: dict[str, int]) -> np.ndarray:
    """Kind of each event: from the category for complete ("X") events, else instant or memory."""
    try:
        kinds = np.fromiter(map(_KIND_BY_RAW_CATEGORY.get, cats, repeat(0)), np.uint8, len(cats))
    except TypeError:  # an unhashable category (a list, an object): take the careful path
        kinds = np.zeros(len(cats), np.uint8)
    complete = phases == PHASE_CODE["X"]
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



def raw_times(ts: tuple, durs: tuple, phases: np.ndarray,
              ns_per_unit: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Start and duration in ns from the texts of ``ts``/``dur``, vectorized (``trace_times``), or
    None when they are not all plain decimals within range (or not texts at all)."""
    if not ts or type(ts[0]) is not msgspec.Raw or ns_per_unit != 1000:
        return None
    start = decimal_ns(ts)
    dur = None if start is None else decimal_ns(durs)
    if dur is None:
        return None
    dur[phases != PHASE_CODE["X"]] = 0
    return start, dur
