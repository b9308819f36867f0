"""Reads Kineto / Chrome trace JSON files (``.json`` or ``.json.gz``) into an ``EventBatch``.

Covers every generation of the PyTorch profiler's output: the 2021 categories (``Kernel``,
``Runtime``, ``Memcpy``, ``Memset``, ``Operator``, ``external id``), the current ones (``kernel``,
``cuda_runtime``, ``cuda_driver``, ``gpu_memcpy``, ``gpu_memset``, ``cuda_sync``, ...), integer-µs
timestamps and ns-resolution decimal timestamps relative to ``baseTimeNanoseconds``, ROCm ``hip*``
launches and CPU-only traces.

The text is read as a stream (``trace_stream``): pieces of the event list are decoded against the
typed schema of ``trace_schema`` (only the fields we use, one struct per phase, ``args`` decoded per
kind once the kinds are known) and converted to columns (``trace_convert.convert_part``: a few
C-level passes per field, no Python loop per event; the cycle collector and numpy's huge-page advice
paused, ``_ReadingSettings``); ``trace_assemble`` joins the pieces in whole-file order. Timestamps
are converted from their decimal text (``trace_times``), so that ``"1712195495519695.8"`` µs
becomes exactly ``1712195495519695800`` ns (a float would be 50 ns off).

A string longer than ``MAX_STRING_CHARS`` (64 Ki characters: an event name, an ``args`` value, a
process, thread or host name) is cut to that length and counted (``meta["strings_cut"]``): no real
kernel or operator name comes near, and every later step reads each name at least once. A file
whose events are all unusable (none a complete or instant event with a name and a usable time) is
refused; one with no events at all is an empty profile.
"""

from __future__ import annotations

import gc
import importlib
import os
import re
import threading
from contextlib import closing
from typing import Any, Callable

from cuda_tracer.model.events import MISSING
from cuda_tracer.profile import RankProfile, TraceError
from cuda_tracer.trace_json.assemble import Assembly, Part, assemble
from cuda_tracer.trace_json.columns import NS_PER_UNIT, TIME_LIMIT_NS, cut_long_strings, to_int
from cuda_tracer.trace_json.convert import convert_part
from cuda_tracer.trace_json.read_ahead import ahead, read_ahead
from cuda_tracer.trace_input import read_text, text_chunks, text_size
from cuda_tracer.trace_json.parallel import MIN_PARALLEL_TEXT, can_fork, read_parallel
from cuda_tracer.trace_json.scan import native_scanner
from cuda_tracer.trace_json.schema import Complete, TraceFile
from cuda_tracer.trace_json.stream import read_stream


THREADED_TEXT = 12 << 20
"""Less JSON text (about one piece) is read faster in one thread: there is no other piece to scan
while one is converted. On 14 to 26 MB traces the threads took 5 to 21 % off the read
(docs/benchmarks.md)."""
FIRST_PIECE_BYTES = 1 << 20  # the threads' first piece: converted while the next one is scanned
TEXT_BYTES_PER_ROW = 256  # about what a Kineto trace holds (flow events counted in): sizes the columns
_RANK_IN_FILENAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
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
    parts: list[Part] | Assembly
    with _READING:
        if workers > 1 and can_fork() and text_size(path) >= MIN_PARALLEL_TEXT:
            doc, parts = read_parallel(path, chunks, workers)
        else:
            doc, parts = _read_serial(path, chunks)
        rank = finish(path, doc, parts)
    skipped = rank.meta["skipped_events"]
    if not len(rank.batch) and skipped:
        raise TraceError(path, f"no usable event: none of its {skipped:,} events is a complete (X) or "
                               "instant (i) event with a name and a usable time")
    return rank


def _read_serial(path: str, chunks) -> tuple[TraceFile, list[Part] | Assembly]:
    """The file's fields and its pieces' ``Part``s, read by this process. With the native scanner
    and a file of ``THREADED_TEXT`` or more, three threads overlap: one decompresses, one cuts and
    scans pieces (without the GIL), and this one converts the scanned pieces into columns and joins
    them (``Assembly``) while the next ones are scanned."""
    parts: list[Part] = []
    if not native_scanner() or text_size(path) < THREADED_TEXT:
        return read_stream(path, chunks, lambda events: parts.append(convert_part(events))), parts
    assembly = Assembly(text_size(path) // TEXT_BYTES_PER_ROW)
    text = read_ahead(chunks)
    scanned = ahead(lambda emit: read_stream(path, text, emit, first_piece_bytes=FIRST_PIECE_BYTES))
    with closing(text), closing(scanned):
        while True:
            try:
                events = next(scanned)
            except StopIteration as end:
                return end.value, assembly
            assembly.add(convert_part(events))


def _huge_page_advice() -> Callable[[bool], bool] | None:
    """numpy's switch for advising huge pages on its large arrays (sets it, returns what it was);
    private to numpy, so None where a numpy has none."""
    for module in ("numpy._core.multiarray", "numpy.core.multiarray"):  # numpy 2, numpy 1
        try:
            return importlib.import_module(module)._set_madvise_hugepage
        except (ImportError, AttributeError):
            continue
    return None  # pragma: no cover - every numpy the project supports has it


class _ReadingSettings:
    """What a read switches off in the process, and back on once the last read in any thread ends:

    - Python's cycle collector: reading allocates a few hundred thousand containers and frees none
      of them, so every collection it would trigger (several full ones on a large trace, each
      walking everything alive) is wasted time;
    - numpy's advice that its arrays of 4 MiB or more be backed by huge pages: a read fills fresh
      arrays once (pieces' columns, the file's columns) and never walks them again, and where the
      system compacts memory on such faults (transparent huge pages with ``defrag`` at
      ``madvise``, a common default) those faults cost more system time than the whole scan
      (``docs/benchmarks.md``).

    Readers in several threads share one pause; the last one out restores what the first one
    found."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._readers = 0
        self._collector_was_enabled = False
        self._advice_was_on: bool | None = None
        self._set_advice = _huge_page_advice()

    def __enter__(self) -> None:
        with self._lock:
            if self._readers == 0:
                self._collector_was_enabled = gc.isenabled()
                gc.disable()
                if self._set_advice is not None:
                    self._advice_was_on = self._set_advice(False)
            self._readers += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._readers -= 1
            if self._readers == 0:
                if self._collector_was_enabled:
                    gc.enable()
                if self._set_advice is not None and self._advice_was_on:
                    self._set_advice(True)


_READING = _ReadingSettings()


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


def finish(path: str, doc: TraceFile, parts: list[Part] | Assembly) -> RankProfile:
    """The rank of a file whose events were converted into ``parts`` (or joined already, in an
    ``Assembly``); ``doc`` holds the file's other fields (and possibly its last events, converted
    here)."""
    base_ns = _base_ns(doc, path)
    last = [convert_part(doc.traceEvents)] if doc.traceEvents else []
    if last:
        doc.traceEvents = None
    if isinstance(parts, Assembly):
        for part in last or ([] if parts.parts else [convert_part([])]):
            parts.add(part)
        batch, facts = parts.join()
    else:
        parts += last or ([] if parts else [convert_part([])])
        batch, facts = assemble(parts)
    if len(batch):
        batch.columns["start_ns"] += base_ns
        batch.columns["end_ns"] += base_ns
    window = facts.window and [facts.window[0] + base_ns, facts.window[1] + base_ns]
    meta = _file_meta(path, doc)
    meta.update(processes=facts.processes, threads=facts.threads, profiler_window_ns=window,
                flow_events=facts.flows, skipped_events=facts.skipped)
    cut = facts.strings_cut + _cut_long_strings(batch, meta)
    if cut:
        meta["strings_cut"] = cut
    if len(batch):
        batch.columns["rank"][:] = meta["rank"]
    return RankProfile(meta=meta, batch=batch)


def _cut_long_strings(batch: Any, meta: dict[str, Any]) -> int:
    """Cut every string of a rank longer than ``MAX_STRING_CHARS`` (names and keys, process,
    thread and host names; ``args`` values were cut piece by piece, ``convert_part``); returns how
    many were cut."""
    cut = cut_long_strings(batch.strings, None)
    for names in (meta["processes"], meta["threads"]):
        cut += cut_long_strings(names, list(names))
    return cut + cut_long_strings(meta, ["host_name"])


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
