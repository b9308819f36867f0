"""Decoded trace events to columns: one piece of a file's event list (or events a live source
already holds) becomes one ``Part`` (``trace_assemble`` joins the parts in file order).

Each step is one C-level pass per field over all events (``trace_columns``): phases, names into the
batch's string table, kinds from categories, exact ns times from the decimal text (``trace_times``),
``args`` decoded once per group of kinds into the narrow struct that group needs
(``trace_schema``). The rare malformed event (no name, unusable time) is dropped and counted.
Runs in the reading process, or in reader processes (``trace_parallel``).
"""

from __future__ import annotations

import re
from itertools import repeat
from operator import attrgetter
from typing import Any, cast

import msgspec
import numpy as np

from cuda_tracer.model.costed_operators import costed_operators
from cuda_tracer.model.events import COLUMNS, MISSING, Kind, kinds_in, memcpy_kind_from_name
from cuda_tracer.model.string_table import StringTable
from cuda_tracer.trace_json.assemble import Part
from cuda_tracer.trace_json.columns import (Extras, call_stacks, collectives, compress_columns, cut_long_strings,
                            field_columns, gpu_columns, ints, memory_columns, operator_shapes, string_ids,
                            string_index, times, typed, usable_time)
from cuda_tracer.trace_json.scan import ScannedArgsSource, ScannedPiece, StructArgsSource
from cuda_tracer.trace_json.schema import (GPU_ARGS, HOST_ARGS, MEMORY_ARGS, METADATA_ARGS, PHASE_CODE, Event,
                           phase_codes, time_values)
from cuda_tracer.trace_json.times import decimal_ns


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
_GPU_KIND_CODES = np.array([Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.SYNC, Kind.GPU_USER_ANNOTATION],
                           dtype=np.uint8)
_EVENT_FIELDS = ("cat", "name", "ts", "dur", "pid", "tid", "args")


def convert_part(all_events: Any, ns_per_unit: int = 1000) -> Part:
    """Decoded events (or a ``ScannedPiece``) to columns (times relative to the file's base). Each
    step is one C-level pass per field over all events; the rare malformed event (no name,
    unusable time) is dropped and counted in ``skipped``."""
    if isinstance(all_events, ScannedPiece):
        return _part(*_scanned_fields(all_events))
    return _part(*_struct_fields(all_events, ns_per_unit))


def _struct_fields(all_events: list[Any], ns_per_unit: int) -> tuple:
    """The fields of decoded events (``trace_schema`` structs), as ``_part`` takes them."""
    ph = phase_codes(all_events)
    span = (ph == PHASE_CODE["X"]) | (ph == PHASE_CODE["i"]) | (ph == PHASE_CODE["I"])
    metadata = [all_events[i] for i in np.flatnonzero(ph == PHASE_CODE["M"]).tolist()]
    events = list(map(all_events.__getitem__, np.flatnonzero(span).tolist()))
    phases = ph[span]
    flows, skipped = _flows_and_skipped(ph, len(events))

    fields: list[Any] = field_columns(events, _EVENT_FIELDS)  # (tuples; the times become lists)
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
            fast = times(fields[2], fields[3], phases, 0, ns_per_unit)
        start, dur = fast
    except (ArithmeticError, ValueError, TypeError):  # decimal errors are ArithmeticErrors
        good = np.fromiter(map(usable_time, fields[2], fields[3], repeat(ns_per_unit)), bool,
                           len(phases))
        skipped += int((~good).sum())
        fields, phases, index = compress_columns(fields, good), phases[good], None
        start, dur = times(fields[2], fields[3], phases, 0, ns_per_unit)
    good = dur >= 0
    if not good.all():
        skipped += int((~good).sum())
        fields, phases, start, dur = compress_columns(fields, good), phases[good], start[good], dur[good]
        index = None
    cats, names, _, _, pids, tids, raw_args = fields
    if index is None:
        index = cast("dict[str, int]", string_index(names))  # every name left is a string
    name_ids = np.fromiter(map(index.__getitem__, names), np.int32, len(names))
    cat_ids, cat_strings = string_ids(cats)
    return (phases, name_ids, list(index), cat_ids, cat_strings, start, dur, ints(pids), ints(tids),
            StructArgsSource(raw_args), metadata, flows, skipped)


def _scanned_fields(scanned: ScannedPiece) -> tuple:
    """The fields of a scanned piece (``trace_scan``), as ``_part`` takes them."""
    ph = scanned.phase
    span = (ph == PHASE_CODE["X"]) | (ph == PHASE_CODE["i"]) | (ph == PHASE_CODE["I"])
    metadata = scanned.metadata_events(np.flatnonzero(ph == PHASE_CODE["M"]))
    rows = np.flatnonzero(span)
    flows, skipped = _flows_and_skipped(ph, len(rows))
    phases, start, dur = ph[rows], scanned.ts[rows], scanned.dur[rows].copy()
    dur[phases != PHASE_CODE["X"]] = 0
    good = (scanned.name[rows] >= 0) & (dur >= 0)  # named, and not ending before it starts
    if not good.all():
        skipped += int((~good).sum())
        rows, phases, start, dur = rows[good], phases[good], start[good], dur[good]
    name_ids, strings = _first_seen(scanned.name[rows], scanned.strings)
    return (phases, name_ids, strings, scanned.cat[rows], scanned.strings, start, dur,
            scanned.ids("pid", rows), scanned.ids("tid", rows), ScannedArgsSource(scanned, rows),
            metadata, flows, skipped)


def _flows_and_skipped(ph: np.ndarray, spans: int) -> tuple[int, int]:
    flows = int(np.count_nonzero(kinds_in(ph, [PHASE_CODE[p] for p in "sft"])))
    return flows, len(ph) - spans - flows - int(np.count_nonzero(ph == PHASE_CODE["M"]))


def _first_seen(ids: np.ndarray, table: list[str]) -> tuple[np.ndarray, list[str]]:
    """Ids into ``table`` renumbered in order of first appearance (equal strings one id), and the
    strings in that order."""
    distinct, first = np.unique(ids, return_index=True)
    index: dict[str, int] = {}
    for i in distinct[np.argsort(first)].tolist():
        index.setdefault(table[i], len(index))
    lookup = np.zeros(len(table), np.int32)
    lookup[distinct] = [index[table[i]] for i in distinct.tolist()]
    return lookup[ids], list(index)


def _part(phases: np.ndarray, name_ids: np.ndarray, strings: list[str], cat_ids: np.ndarray,
          cat_strings: list[str], start: np.ndarray, dur: np.ndarray, pids: np.ndarray,
          tids: np.ndarray, args: Any, metadata: list, flows: int, skipped: int) -> Part:
    """Columns from the fields of the events kept: phases, names (``strings[name_ids]``),
    categories (``cat_strings[cat_ids]``, -1: none), times, pids/tids, their args (``trace_scan``
    sources) and the metadata events."""
    processes, threads = _process_and_thread_names(metadata)
    table = StringTable(strings)  # the names (each once already), then the side table's keys
    kinds = _kinds(cat_ids, cat_strings, phases, name_ids, table)
    steps = _step_numbers(kinds, name_ids, strings)
    kinds[list(steps)] = Kind.STEP

    n = len(name_ids)
    col = {c: np.full(n, MISSING, dt) for c, dt in COLUMNS.items() if dt.kind == "i"}
    col["kind"], col["name"], col["start_ns"], col["end_ns"] = kinds, name_ids, start, start + dur
    col["subkind"] = np.zeros(n, np.uint8)
    names_count = len(strings)
    extra = Extras(table)
    for i, number in steps.items():
        extra.add(i, "step", number)
    gpu = _arg_columns(col, extra, args, pids, tids, name_ids, strings)
    col["pid"] = np.where(gpu, MISSING, pids)
    col["tid"] = np.where(gpu, MISSING, tids)
    memcpy = np.flatnonzero(kinds == Kind.MEMCPY)
    direction = {n: memcpy_kind_from_name(strings[n]) for n in set(name_ids[memcpy].tolist())}
    col["subkind"][memcpy] = [direction[n] for n in name_ids[memcpy].tolist()]
    extra.step = 40
    for i in np.flatnonzero((kinds == Kind.OTHER) & (cat_ids >= 0)).tolist():
        extra.add(i, "category", cat_strings[cat_ids[i]].lower())
    window = None
    for i in np.flatnonzero(kinds == Kind.PROFILER)[:1].tolist():
        window = [int(start[i]), int(start[i] + dur[i])]
    return Part(typed(col), extra.strings, names_count, extra.rows, extra.keys, extra.values,
                extra.order, processes, threads, flows, skipped, window,
                strings_cut=cut_long_strings(extra.values, None))


def _arg_columns(col: dict[str, np.ndarray], extra: "Extras", args: Any, pids: np.ndarray,
                 tids: np.ndarray, name_ids: np.ndarray, strings: list[str]) -> np.ndarray:
    """Every column that comes from ``args``, read per group of kinds (GPU ops, ``[memory]``
    events, the rest) through ``args.views``: one batched decode per group, or the scanner's
    columns. Returns which rows are GPU-side."""
    kinds = col["kind"]
    gpu = kinds_in(kinds, _GPU_KIND_CODES)
    memory = kinds == Kind.MEMORY
    groups = ((np.flatnonzero(gpu), GPU_ARGS), (np.flatnonzero(memory), MEMORY_ARGS),
              (np.flatnonzero(~gpu & ~memory), HOST_ARGS))
    for group, (group_rows, decoder) in enumerate(groups, 1):
        decode_all = kinds[group_rows] == Kind.SYNC  # sync ops need fields only a struct holds
        for rows, view in args.views(group_rows, decoder, decode_all):
            extra.step = 10 * group  # the order of side-table entries (trace_assemble)
            external, legacy, correlation = (view.ints(field) for field in
                                             ("external_id", "external_id_legacy", "correlation"))
            col["external_id"][rows] = np.where(external != MISSING, external, legacy)
            col["correlation"][rows] = correlation
            if view.items is not None:  # decoded: collectives
                collectives(extra, rows, view.items)
            if decoder is HOST_ARGS:
                call_stacks(extra, rows, *view.call_stacks())
            if decoder is GPU_ARGS:
                gpu_columns(col, extra, rows, view, pids[rows], tids[rows], name_ids, strings)
            elif decoder is MEMORY_ARGS:
                memory_columns(col, extra, rows, view)
    costed = np.flatnonzero(kinds == Kind.CPU_OP)
    costed = costed[costed_operators(strings)[name_ids[costed]]] if len(costed) else costed
    costed = costed[args.shaped(costed)] if len(costed) else costed
    if len(costed):
        extra.step = 50
        operator_shapes(extra, costed, args.texts(costed))
    return gpu


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


def _kinds(cat_ids: np.ndarray, cat_strings: list[str], phases: np.ndarray,
           name_ids: np.ndarray, names: StringTable) -> np.ndarray:
    """Kind of each event: from the category for complete ("X") events, else instant or memory.
    Each distinct category is looked up once (as written, then lower-cased); none is OTHER."""
    exact = np.zeros(len(cat_strings) + 1, np.uint8)  # -1 (no category) reads the last entry
    lowered = np.full(len(cat_strings) + 1, Kind.OTHER, np.uint8)
    used = np.flatnonzero(np.bincount(cat_ids + 1, minlength=len(exact))) - 1  # (ids from -1 up)
    for i in used.tolist():  # (the table can hold other strings: only categories read)
        if i >= 0:
            exact[i] = _KIND_BY_RAW_CATEGORY.get(cat_strings[i], 0)
            lowered[i] = _KIND_BY_CATEGORY.get(cat_strings[i].lower(), Kind.OTHER)
    kinds = exact[cat_ids]
    complete = phases == PHASE_CODE["X"]
    unknown = (kinds == 0) & complete
    kinds[unknown] = lowered[cat_ids[unknown]]
    kinds[~complete] = Kind.INSTANT
    kinds[~complete & (name_ids == names.id_of("[memory]"))] = Kind.MEMORY
    return kinds


def _step_numbers(kinds: np.ndarray, name_ids: np.ndarray, strings: list[str]) -> dict[int, int]:
    """Row -> step number for ``ProfilerStep#N`` annotations (or ops, in old traces)."""
    numbers = {i: int(m.group(1)) for i, s in enumerate(strings) if s.startswith("ProfilerStep#")
               and (m := _STEP_NAME.match(s))}
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
    if start is None or dur is None:  # (dur is None whenever start is)
        return None
    dur[phases != PHASE_CODE["X"]] = 0
    return start, dur
