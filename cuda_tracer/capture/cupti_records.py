"""CUPTI activity records → ``EventBatch``: a pure conversion, testable without a GPU or cupti-python.

The input is any sequence of objects that carry the attributes of cupti-python's activity record
classes, as cupti-python 13.0 delivers them: ``ActivityKernel10`` (CONCURRENT_KERNEL and KERNEL),
``ActivityMemcpy6``, ``ActivityMemcpyPtoP4``, ``ActivityMemset4``, ``ActivityAPI``,
``ActivitySynchronization2``, ``ActivityMarker2``, ``ActivityName``, ``ActivityOverhead3``
(attribute names as in its ``cupti/cupti.pyi``; ``object_id`` is a union whose ``pt`` and ``dcs``
views share their first bytes). Records are read with ``getattr`` only, and every value is copied
into the batch's columns: the records are views into CUPTI's buffer, which is released once they are
dropped. tests/cuda_tracer/test_cupti_real_module.py converts records built with the module's own dtypes.

Enum values are the CUPTI C ABI (``cupti_activity.h``), which cupti-python's IntEnums mirror
one-to-one (but for ``CUPTI_ACTIVITY_FLAG_MARKER_END``, which cupti-python's ``ActivityFlag`` lacks);
:func:`enum_mismatches` checks that against a loaded ``cupti`` module. Names follow Kineto's spelling, so events from a live CUPTI capture and from a PyTorch trace file
line up: ``"Memcpy HtoD (Pageable -> Device)"``, ``"Memset (Device)"``, ``"Stream Sync"``, and runtime
calls named by their API function without the ``_vNNNN`` suffix (``"cudaLaunchKernel"``).

Kinds: CONCURRENT_KERNEL/KERNEL → KERNEL; MEMCPY/MEMCPY2 → MEMCPY (subkind = direction, side table
``src_memory``/``dst_memory`` = ``"pageable"``, ``"pinned"``, ``"device"``..., ``async``); MEMSET →
MEMSET; SYNCHRONIZATION → SYNC (subkind = ``SyncKind``); RUNTIME/DRIVER → RUNTIME/DRIVER;
MARKER (NVTX) start/end pairs and instantaneous markers → USER_ANNOTATION; OVERHEAD → OVERHEAD;
NAME records name threads/devices/streams and go to :attr:`RecordConverter.object_names`.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable

from cuda_tracer.model.events import MISSING, BatchBuilder, EventBatch, Kind, MemcpyKind, SyncKind

# ---------------------------------------------------------------- CUPTI C ABI values (cupti_activity.h)
ACTIVITY_KIND = {
    "MEMCPY": 1, "MEMSET": 2, "KERNEL": 3, "DRIVER": 4, "RUNTIME": 5, "CONCURRENT_KERNEL": 10,
    "NAME": 11, "MARKER": 12, "OVERHEAD": 17, "MEMCPY2": 22, "SYNCHRONIZATION": 38,
}
MEMCPY_KIND = {"UNKNOWN": 0, "HTOD": 1, "DTOH": 2, "HTOA": 3, "ATOH": 4, "ATOA": 5, "ATOD": 6,
               "DTOA": 7, "DTOD": 8, "HTOH": 9, "PTOP": 10}
MEMORY_KIND = {"UNKNOWN": 0, "PAGEABLE": 1, "PINNED": 2, "DEVICE": 3, "ARRAY": 4, "MANAGED": 5,
               "DEVICE_STATIC": 6, "MANAGED_STATIC": 7}
SYNC_TYPE = {"UNKNOWN": 0, "EVENT_SYNCHRONIZE": 1, "STREAM_WAIT_EVENT": 2, "STREAM_SYNCHRONIZE": 3,
             "CONTEXT_SYNCHRONIZE": 4}
OBJECT_KIND = {"UNKNOWN": 0, "PROCESS": 1, "THREAD": 2, "DEVICE": 3, "CONTEXT": 4, "STREAM": 5}
OVERHEAD_KIND = {"UNKNOWN": 0, "DRIVER_COMPILER": 1, "CUPTI_BUFFER_FLUSH": 1 << 16,
                 "CUPTI_INSTRUMENTATION": 2 << 16, "CUPTI_RESOURCE": 3 << 16}
FLAG_ASYNC = 1  # CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC == CUPTI_ACTIVITY_FLAG_MEMSET_ASYNC == 1 << 0
# cupti_activity.h: MARKER_INSTANTANEOUS 1 << 0, MARKER_START 1 << 1, MARKER_END 1 << 2,
# MARKER_SYNC_ACQUIRE 1 << 3. cupti-python's ActivityFlag has every one of them but MARKER_END.
FLAG_MARKER_INSTANTANEOUS, FLAG_MARKER_START, FLAG_MARKER_END = 1, 2, 4
INVALID_ID = 0xFFFFFFFF  # CUPTI_INVALID_STREAM_ID / CUPTI_SYNCHRONIZATION_INVALID_VALUE

# Arrays (cudaArray) live on the device, so array copies take the direction of their host/device ends.
_DIRECTION = {
    MEMCPY_KIND["HTOD"]: MemcpyKind.HtoD, MEMCPY_KIND["HTOA"]: MemcpyKind.HtoD,
    MEMCPY_KIND["DTOH"]: MemcpyKind.DtoH, MEMCPY_KIND["ATOH"]: MemcpyKind.DtoH,
    MEMCPY_KIND["DTOD"]: MemcpyKind.DtoD, MEMCPY_KIND["ATOA"]: MemcpyKind.DtoD,
    MEMCPY_KIND["ATOD"]: MemcpyKind.DtoD, MEMCPY_KIND["DTOA"]: MemcpyKind.DtoD,
    MEMCPY_KIND["HTOH"]: MemcpyKind.HtoH, MEMCPY_KIND["PTOP"]: MemcpyKind.PtoP,
}
_COPY_LABEL = {v: k[0] + "to" + k[-1] for k, v in MEMCPY_KIND.items() if len(k) == 4}  # 1 -> "HtoD"
_MEMORY_LABEL = {v: k.lower() for k, v in MEMORY_KIND.items()}  # 1 -> "pageable"
_SYNC = {  # type -> (SyncKind, Kineto's name)
    SYNC_TYPE["EVENT_SYNCHRONIZE"]: (SyncKind.EVENT, "Event Sync"),
    SYNC_TYPE["STREAM_WAIT_EVENT"]: (SyncKind.STREAM_WAIT_EVENT, "Stream Wait Event"),
    SYNC_TYPE["STREAM_SYNCHRONIZE"]: (SyncKind.STREAM, "Stream Sync"),
    SYNC_TYPE["CONTEXT_SYNCHRONIZE"]: (SyncKind.CONTEXT, "Context Sync"),
}
_API_VERSION_SUFFIX = re.compile(r"_v\d+$")

ApiNamer = Callable[[int, int], str]
"""``(activity kind code, cbid) -> API function name``; see :func:`strip_api_version`."""


def strip_api_version(name: str) -> str:
    """``"cudaLaunchKernel_v7000"`` → ``"cudaLaunchKernel"`` (CUPTI's callback names carry the version)."""
    return _API_VERSION_SUFFIX.sub("", name)


def _fallback_api_name(kind: int, cbid: int) -> str:
    return f"{'cuda' if kind == ACTIVITY_KIND['RUNTIME'] else 'cu'}_cbid_{cbid}"


def _title(enum_name: str) -> str:
    """``"CUPTI_BUFFER_FLUSH"`` → ``"Buffer Flush"`` (overhead names in Kineto's style)."""
    words = enum_name.split("_")
    if words and words[0] == "CUPTI":
        words = words[1:]
    return " ".join(w.capitalize() for w in words) or "Overhead"


def _memory_label(code: int) -> str:
    return _MEMORY_LABEL.get(code, "unknown")


def _id(value: Any) -> int:
    """A CUPTI id as a column value: the 32-bit "invalid" marker (and None) become ``MISSING``."""
    if value is None:
        return MISSING
    value = int(value)
    return MISSING if value == INVALID_ID else value


class RecordConverter:
    """Converts record batches to ``EventBatch``es, keeping what must survive between buffers.

    State kept across :meth:`convert` calls: NVTX range starts whose end has not arrived yet,
    the context → device map (synchronization records carry only a context), and object names.
    Times become Unix-epoch ns by adding ``clock_offset_ns`` (see ``cuda_tracer.capture.cupti.calibrate``).
    """

    def __init__(self, clock_offset_ns: int = 0, api_name: ApiNamer | None = None,
                 overhead_names: dict[int, str] | None = None, rank: int = MISSING) -> None:
        self.clock_offset_ns = int(clock_offset_ns)
        self.api_name = api_name or _fallback_api_name
        self.overhead_names = overhead_names or {v: _title(k) for k, v in OVERHEAD_KIND.items()}
        self.rank = rank
        self.open_markers: dict[int, tuple[str, int, int, int, str]] = {}  # id -> name, t, pid, tid, domain
        self.device_of_context: dict[int, int] = {}
        self.object_names: dict[tuple, str] = {}
        self.unmatched_marker_ends = 0
        self.skipped: dict[int, int] = {}  # activity kind code -> records not converted
        k = ACTIVITY_KIND
        self._handlers: dict[int, Callable[[BatchBuilder, Any], None]] = {
            k["CONCURRENT_KERNEL"]: self._kernel, k["KERNEL"]: self._kernel,
            k["MEMCPY"]: self._memcpy, k["MEMCPY2"]: self._memcpy, k["MEMSET"]: self._memset,
            k["RUNTIME"]: self._api, k["DRIVER"]: self._api,
            k["SYNCHRONIZATION"]: self._sync, k["MARKER"]: self._marker, k["NAME"]: self._name,
            k["OVERHEAD"]: self._overhead,
        }

    # ------------------------------------------------------------------ entry point
    def convert(self, records: Iterable[Any]) -> EventBatch:
        """One batch holding the events of ``records`` (any order; rows follow the input order)."""
        out = BatchBuilder()
        self._sync_rows: list[tuple[int, int]] = []
        for r in records:
            kind = int(r.kind)
            handler = self._handlers.get(kind)
            if handler is None:
                self.skipped[kind] = self.skipped.get(kind, 0) + 1
            else:
                handler(out, r)
        batch = out.build()
        for row, context in self._sync_rows:  # contexts seen anywhere in this or earlier buffers
            batch.columns["device"][row] = self.device_of_context.get(context, MISSING)
        return batch

    # ------------------------------------------------------------------ helpers
    def _t(self, ns: Any) -> int:
        return int(ns) + self.clock_offset_ns

    def _gpu_fields(self, r: Any) -> dict[str, int]:
        """Placement and linkage every GPU-side record has; also learns context → device."""
        device, context = int(r.device_id), getattr(r, "context_id", None)
        if context is not None:
            self.device_of_context[int(context)] = device
        graph = int(getattr(r, "graph_id", 0) or 0)
        return {"device": device, "stream": _id(r.stream_id), "correlation": int(r.correlation_id),
                "graph_id": graph if graph else MISSING, "rank": self.rank}

    def _add_graph_node(self, out: BatchBuilder, row: int, r: Any) -> None:
        node = int(getattr(r, "graph_node_id", 0) or 0)
        if node:
            out.add_extra(row, "graph_node_id", node)

    # ------------------------------------------------------------------ one handler per record kind
    def _kernel(self, out: BatchBuilder, r: Any) -> None:
        row = out.add(Kind.KERNEL, r.name or "<unnamed kernel>", self._t(r.start), self._t(r.end),
                      grid_x=int(r.grid_x), grid_y=int(r.grid_y), grid_z=int(r.grid_z),
                      block_x=int(r.block_x), block_y=int(r.block_y), block_z=int(r.block_z),
                      registers=int(r.registers_per_thread),
                      shared_memory=int(r.static_shared_memory) + int(r.dynamic_shared_memory),
                      **self._gpu_fields(r))
        self._add_graph_node(out, row, r)

    def _memcpy(self, out: BatchBuilder, r: Any) -> None:
        copy_kind, src, dst = int(r.copy_kind), int(r.src_kind), int(r.dst_kind)
        if int(r.kind) == ACTIVITY_KIND["MEMCPY2"]:
            copy_kind = MEMCPY_KIND["PTOP"] if copy_kind == MEMCPY_KIND["UNKNOWN"] else copy_kind
        name = (f"Memcpy {_COPY_LABEL.get(copy_kind, 'Unknown')} "
                f"({_memory_label(src).replace('_', ' ').title()} -> "
                f"{_memory_label(dst).replace('_', ' ').title()})")
        row = out.add(Kind.MEMCPY, name, self._t(r.start), self._t(r.end),
                      subkind=int(_DIRECTION.get(copy_kind, MemcpyKind.UNKNOWN)), bytes=int(r.bytes),
                      **self._gpu_fields(r))
        out.add_extra(row, "src_memory", _memory_label(src))
        out.add_extra(row, "dst_memory", _memory_label(dst))
        out.add_extra(row, "async", bool(int(getattr(r, "flags_", 0) or 0) & FLAG_ASYNC))
        for attr in ("src_device_id", "dst_device_id"):  # peer-to-peer records (MEMCPY2)
            if hasattr(r, attr):
                out.add_extra(row, attr[:-3], int(getattr(r, attr)))
        self._add_graph_node(out, row, r)

    def _memset(self, out: BatchBuilder, r: Any) -> None:
        memory = _memory_label(int(r.memory_kind))
        row = out.add(Kind.MEMSET, f"Memset ({memory.replace('_', ' ').title()})", self._t(r.start),
                      self._t(r.end), bytes=int(r.bytes), **self._gpu_fields(r))
        out.add_extra(row, "memory", memory)
        out.add_extra(row, "value", int(r.value))
        self._add_graph_node(out, row, r)

    def _sync(self, out: BatchBuilder, r: Any) -> None:
        sync_kind, name = _SYNC.get(int(r.type), (SyncKind.UNKNOWN, "Unknown Sync"))
        row = out.add(Kind.SYNC, name, self._t(r.start), self._t(r.end), subkind=int(sync_kind),
                      stream=_id(r.stream_id), correlation=int(r.correlation_id), rank=self.rank)
        self._sync_rows.append((row, int(r.context_id)))
        event = _id(getattr(r, "cuda_event_id", None))
        if event != MISSING:
            out.add_extra(row, "cuda_event_id", event)

    def _api(self, out: BatchBuilder, r: Any) -> None:
        kind = int(r.kind)
        row = out.add(Kind.RUNTIME if kind == ACTIVITY_KIND["RUNTIME"] else Kind.DRIVER,
                      self.api_name(kind, int(r.cbid)), self._t(r.start), self._t(r.end),
                      pid=int(r.process_id), tid=int(r.thread_id), correlation=int(r.correlation_id),
                      rank=self.rank)
        ret = int(getattr(r, "return_value", 0) or 0)
        if ret:
            out.add_extra(row, "return_value", ret)

    def _thread_of(self, r: Any) -> tuple[int, int]:
        """(pid, tid) of a marker/overhead record whose object is a process or thread."""
        if int(getattr(r, "object_kind", 0)) in (OBJECT_KIND["THREAD"], OBJECT_KIND["PROCESS"]):
            pt = r.object_id.pt
            tid = int(pt.thread_id) if int(r.object_kind) == OBJECT_KIND["THREAD"] else MISSING
            return int(pt.process_id), tid
        return MISSING, MISSING

    def _marker(self, out: BatchBuilder, r: Any) -> None:
        flags, t = int(r.flags_), self._t(r.timestamp)
        pid, tid = self._thread_of(r)
        domain = r.domain or ""
        if flags & FLAG_MARKER_START:
            self.open_markers[int(r.id)] = (r.name or "", t, pid, tid, domain)
            return
        if flags & FLAG_MARKER_END:
            opened = self.open_markers.pop(int(r.id), None)
            if opened is None:
                self.unmatched_marker_ends += 1  # its start came before capture began
                return
            name, start, pid, tid, domain = opened
            row = out.add(Kind.USER_ANNOTATION, name, start, t, pid=pid, tid=tid, rank=self.rank)
        elif flags & FLAG_MARKER_INSTANTANEOUS:
            row = out.add(Kind.USER_ANNOTATION, r.name or "", t, t, pid=pid, tid=tid, rank=self.rank)
        else:
            return  # sync-object markers (acquire/release) are not annotations
        out.add_extra(row, "source", "nvtx")
        if domain:
            out.add_extra(row, "domain", domain)

    def _name(self, out: BatchBuilder, r: Any) -> None:
        kind, oid = int(r.object_kind), r.object_id
        if kind == OBJECT_KIND["THREAD"]:
            key: tuple = ("thread", int(oid.pt.process_id), int(oid.pt.thread_id))
        elif kind == OBJECT_KIND["PROCESS"]:
            key = ("process", int(oid.pt.process_id))
        else:
            dcs = oid.dcs  # cupti-python 13.0 names the field device_id (its samples say device)
            device = int(getattr(dcs, "device_id", getattr(dcs, "device", MISSING)))
            key = {OBJECT_KIND["DEVICE"]: ("device", device),
                   OBJECT_KIND["CONTEXT"]: ("context", device, int(dcs.context_id)),
                   OBJECT_KIND["STREAM"]: ("stream", device, int(dcs.context_id),
                                           int(dcs.stream_id))}.get(kind, ("unknown", kind))
        self.object_names[key] = r.name or ""

    def _overhead(self, out: BatchBuilder, r: Any) -> None:
        code = int(r.overhead_kind)
        pid, tid = self._thread_of(r)
        row = out.add(Kind.OVERHEAD, self.overhead_names.get(code, f"Overhead {code}"),
                      self._t(r.start), self._t(r.end), pid=pid, tid=tid,
                      correlation=int(getattr(r, "correlation_id", MISSING)), rank=self.rank)
        out.add_extra(row, "overhead_kind", code)


def convert_records(records: Iterable[Any], clock_offset_ns: int = 0,
                    api_name: ApiNamer | None = None) -> EventBatch:
    """Stateless convenience: one batch from one set of records (markers must pair within it)."""
    return RecordConverter(clock_offset_ns, api_name).convert(records)


def enum_mismatches(cupti: Any) -> list[str]:
    """Where a loaded cupti-python module's enums differ from the ABI values used here (empty: none)."""
    tables = [("ActivityKind", ACTIVITY_KIND), ("ActivityMemcpyKind", MEMCPY_KIND),
              ("ActivityMemoryKind", MEMORY_KIND), ("ActivitySynchronizationType", SYNC_TYPE),
              ("ActivityObjectKind", OBJECT_KIND), ("ActivityOverheadKind", OVERHEAD_KIND)]
    # MARKER_END is not in cupti-python's ActivityFlag: its neighbours pin the value 1 << 2 instead.
    flags = {"MEMCPY_ASYNC": FLAG_ASYNC, "MEMSET_ASYNC": FLAG_ASYNC,
             "MARKER_INSTANTANEOUS": FLAG_MARKER_INSTANTANEOUS, "MARKER_START": FLAG_MARKER_START,
             "MARKER_SYNC_ACQUIRE": FLAG_MARKER_END << 1}
    tables.append(("ActivityFlag", flags))
    out = []
    for enum_name, table in tables:
        enum = getattr(cupti, enum_name, None)
        for member, value in table.items():
            got = getattr(enum, member, None) if enum is not None else None
            if got is None or int(got) != value:
                out.append(f"{enum_name}.{member}: expected {value}, module has {got!r}")
    return out


def overhead_names_from(cupti: Any) -> dict[int, str]:
    """Every overhead kind the loaded module knows, named in Kineto's style."""
    names = {v: _title(k) for k, v in OVERHEAD_KIND.items()}
    enum = getattr(cupti, "ActivityOverheadKind", None)
    for member in getattr(enum, "__members__", {}).values():
        if member.name != "FORCE_INT":
            names[int(member)] = _title(member.name)
    return names

