"""Span attributes: their names (``ATTRIBUTES``), how they are collected into columns, and the
resource of a rank.

Names follow the OpenTelemetry semantic conventions where one exists (``service.name``,
``host.name``, ``process.pid``, ``thread.id``); no ``gpu.*`` or ``cuda.*`` convention exists,
so ``gpu.*`` here is this project's namespace for GPU
facts and ``otel_profiler.*`` for profiler bookkeeping. Used by ``otel_profiler.spans.build``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from cuda_tracer.model.events import GPU_OP_KINDS, MISSING, Kind, MemcpyKind, SyncKind

from ..analysis.breakdown import KERNEL_CLASSES, classify
from ..analysis.step_figures import root_figures
from ..names import demangle
from .options import SpanOptions

ATTRIBUTES = {
    "otel_profiler.kind": "what the span is: step, window, annotation, runtime, driver, kernel, memcpy, "
                          "memset, sync, gpu_annotation",
    "otel_profiler.step": "training step number (root span of a step trace)",
    "otel_profiler.rank": "distributed rank (root span; also a resource attribute)",
    "otel_profiler.run.id": "run id shared by all ranks of a job (root span; also resource)",
    "otel_profiler.window.start_ns": "start of the window (root span of a window trace)",
    "otel_profiler.span_budget": "the span budget of the trace (root span)",
    "otel_profiler.spans.individual": "events exported as individual spans in this trace (root span)",
    "otel_profiler.spans.aggregated_events": "events counted in aggregate spans of this trace (root span)",
    "otel_profiler.span_selection": "how individual spans were chosen (root span)",
    "otel_profiler.top_kernels": "names of the kernels with the most GPU time in the trace (root span)",
    "otel_profiler.top_operators": "PyTorch operators whose kernels took the most GPU time in the trace, "
                                   "innermost operator that launched each kernel (root span)",
    "otel_profiler.top_operator": "the first of otel_profiler.top_operators, as one string a trace search "
                                  "can match (root span)",
    "gpu.memory.peak_allocated_bytes": "largest allocated GPU memory in the trace, from [memory] events "
                                       "(root span; needs memory recording)",
    "gpu.memory.peak_reserved_bytes": "largest GPU memory reserved by the caching allocator in the trace "
                                      "(root span; needs memory recording)",
    "otel_profiler.raw_name": "the name as the trace recorded it, where the span name is its demangled "
                              "form (C++ symbols such as _ZN7ck_tile6kentry...)",
    "otel_profiler.aggregated": "true on aggregate spans",
    "otel_profiler.aggregate.count": "events counted in an aggregate span",
    "otel_profiler.aggregate.duration_ns": "summed duration of those events",
    "otel_profiler.aggregate.max_duration_ns": "longest of those events",
    "thread.id": "(semconv) CPU thread of an annotation or API call",
    "gpu.device.id": "GPU index",
    "gpu.stream.id": "CUDA stream",
    "gpu.correlation.id": "CUPTI correlation id linking a GPU op to its launch call",
    "gpu.launch.delay_ns": "launch delay (HTA): gpu start - launch call end, clipped at 0",
    "gpu.launch.latency_ns": "launch latency (Nsight): gpu start - launch call start",
    "gpu.kernel.class": "compute, communication or memory",
    "gpu.kernel.grid.x/y/z, gpu.kernel.block.x/y/z": "launch geometry",
    "gpu.kernel.registers": "registers per thread",
    "gpu.kernel.shared_memory": "shared memory bytes",
    "gpu.graph.id": "CUDA graph that ran the kernel",
    "gpu.memory.bytes": "bytes copied or set",
    "gpu.memory.bandwidth_gbps": "bytes / duration, in GB/s (1e9 bytes per second)",
    "gpu.memcpy.kind": "copy direction: HtoD, DtoH, DtoD, PtoP, HtoH",
    "gpu.sync.kind": "what a sync waited for: stream, event, context, stream_wait_event",
    "gpu.api.synchronizing": "true on runtime/driver calls that block the CPU until the GPU is done",
}

_SYNC_CALL = re.compile(r"Synchronize")

KIND_NAMES = {k: k.name.lower() for k in Kind}
KIND_NAMES[Kind.USER_ANNOTATION] = "annotation"
KIND_NAMES[Kind.GPU_USER_ANNOTATION] = "gpu_annotation"


@dataclass
class AttrColumn:
    """One attribute over all spans: ``values`` per span, set where ``present`` (None: everywhere).

    ``type`` is ``int`` (int64), ``double`` (float64), ``bool`` or ``value`` (int index into
    ``SpanTable.values``: any string / list value, encoded once per distinct value).
    """

    key: str
    type: str
    values: np.ndarray
    present: np.ndarray | None = None



class Columns:
    """Collects the attribute columns of a span table under construction."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.attrs: list[AttrColumn] = []
        self.values: list[Any] = []
        self._value_index: dict[Any, int] = {}

    def value_id(self, value: Any) -> int:
        key = (type(value).__name__, tuple(value) if isinstance(value, list) else value)
        i = self._value_index.get(key)
        if i is None:
            i = self._value_index[key] = len(self.values)
            self.values.append(value)
        return i

    def add(self, key: str, type_: str, rows: np.ndarray, values: np.ndarray) -> None:
        """Set ``key`` on spans ``rows`` (skips empty ones)."""
        if not len(rows):
            return
        dtype = {"int": np.int64, "double": np.float64, "bool": np.bool_, "value": np.int64}[type_]
        col = np.zeros(self.n, dtype)
        col[rows] = values
        present = np.zeros(self.n, bool)
        present[rows] = True
        self.attrs.append(AttrColumn(key, type_, col, None if present.all() else present))

    def add_present(self, key: str, rows: np.ndarray, values: np.ndarray) -> None:
        """Integer attribute on ``rows`` where the value is not ``MISSING``."""
        ok = values != MISSING
        self.add(key, "int", rows[ok], values[ok])

    def add_values(self, key: str, rows: np.ndarray, per_row: list[Any]) -> None:
        self.add(key, "value", rows, np.array([self.value_id(v) for v in per_row], np.int64))



def root_attributes(cols, batch, opt, run_id, rank, traces, roots, trace_row, keep, a_trace, a_count,
                dev_rows) -> None:
    """Attributes of the root spans (span positions 0..len(roots)-1; ``roots`` are trace indexes)."""
    n_traces, pos = len(traces.numbers), np.arange(len(roots))
    step = traces.is_step[roots]
    cols.add("otel_profiler.step", "int", pos[step], traces.numbers[roots][step])
    cols.add("otel_profiler.window.start_ns", "int", pos[~step], traces.window_start[roots][~step])
    cols.add("otel_profiler.rank", "int", pos, np.full(len(roots), rank))
    cols.add_values("otel_profiler.run.id", pos, [run_id] * len(roots))
    cols.add("otel_profiler.span_budget", "int", pos, np.full(len(roots), opt.budget))
    individual = np.bincount(trace_row[keep & (trace_row >= 0)], minlength=n_traces)
    cols.add("otel_profiler.spans.individual", "int", pos, individual[roots])
    aggregated = np.bincount(a_trace, weights=a_count, minlength=n_traces).astype(np.int64)
    cols.add("otel_profiler.spans.aggregated_events", "int", pos, aggregated[roots])
    cols.add_values("otel_profiler.span_selection", pos,
                    [f"costliest GPU ops (with launch calls) and API calls by duration within "
                     f"{opt.budget} spans; the rest aggregated per (trace, kind, name)"] * len(roots))
    # Top kernels by total GPU time per trace.
    kern = dev_rows[batch.kind[dev_rows] == Kind.KERNEL]
    tops: list[list[str]] = [[] for _ in range(n_traces)]
    if len(kern) and opt.top_kernels > 0:
        tr = trace_row[kern]
        key = tr * (len(batch.strings) + 1) + batch.name[kern]
        ukey, inv = np.unique(key, return_inverse=True)
        total = np.bincount(inv, weights=batch.duration_ns[kern])
        order = np.lexsort((-total, ukey // (len(batch.strings) + 1)))
        for k in order.tolist():
            t = int(ukey[k] // (len(batch.strings) + 1))
            if len(tops[t]) < opt.top_kernels:
                tops[t].append(demangle(batch.strings[int(ukey[k] % (len(batch.strings) + 1))]))
    has = [p for p, t in enumerate(roots.tolist()) if tops[t]]
    cols.add_values("otel_profiler.top_kernels", np.asarray(has, np.int64), [tops[roots[p]] for p in has])


def figure_attributes(cols, batch, corr, opt, traces, roots, trace_row) -> None:
    """Top operators and the GPU memory peak of each root span (``analysis.step_figures``)."""
    fig = root_figures(batch, corr, trace_row, traces.start, traces.end, opt.top_kernels)
    has = [p for p, t in enumerate(roots.tolist()) if fig.top_operators[t]]
    cols.add_values("otel_profiler.top_operators", np.asarray(has, np.int64),
                    [fig.top_operators[roots[p]] for p in has])
    cols.add_values("otel_profiler.top_operator", np.asarray(has, np.int64),
                    [fig.top_operators[roots[p]][0] for p in has])
    pos = np.arange(len(roots))
    for key, values in (("gpu.memory.peak_allocated_bytes", fig.peak_allocated[roots]),
                        ("gpu.memory.peak_reserved_bytes", fig.peak_reserved[roots])):
        cols.add(key, "int", pos[values >= 0], values[values >= 0])


def event_attributes(cols, batch, ev, ev_span, launch_row, corr) -> None:
    kind = batch.kind[ev]
    cpu = np.flatnonzero(batch.tid[ev] != MISSING)
    cols.add("thread.id", "int", ev_span[cpu], batch.tid[ev][cpu])
    gpu = np.flatnonzero(np.isin(kind, np.asarray(GPU_OP_KINDS + (Kind.SYNC, Kind.GPU_USER_ANNOTATION),
                                                  np.uint8)))
    cols.add_present("gpu.device.id", ev_span[gpu], batch.device[ev][gpu].astype(np.int64))
    cols.add_present("gpu.stream.id", ev_span[gpu], batch.stream[ev][gpu])
    cols.add_present("gpu.correlation.id", ev_span, batch.correlation[ev])
    # Blocking synchronization calls (cudaStreamSynchronize, cuCtxSynchronize, cudaEventSynchronize...;
    # not cudaStreamWaitEvent, which only enqueues a wait on the GPU).
    calls = np.flatnonzero(np.isin(kind, np.asarray([Kind.RUNTIME, Kind.DRIVER], np.uint8)))
    if len(calls):
        is_sync = np.array([bool(_SYNC_CALL.search(n)) for n in batch.strings] or [False])
        blocking = calls[is_sync[batch.name[ev][calls]]]
        cols.add("gpu.api.synchronizing", "bool", ev_span[blocking], np.ones(len(blocking), bool))
    # Launch delay/latency of GPU ops and syncs with a launch call (HTA / Nsight definitions).
    l_row = launch_row[ev]
    has_launch = np.flatnonzero(l_row >= 0)
    g_start = batch.start_ns[ev][has_launch]
    lr = l_row[has_launch]
    cols.add("gpu.launch.latency_ns", "int", ev_span[has_launch], g_start - batch.start_ns[lr])
    cols.add("gpu.launch.delay_ns", "int", ev_span[has_launch], np.maximum(g_start - batch.end_ns[lr], 0))
    kern = np.flatnonzero(kind == Kind.KERNEL)
    for key, col in (("gpu.kernel.grid.x", "grid_x"), ("gpu.kernel.grid.y", "grid_y"),
                     ("gpu.kernel.grid.z", "grid_z"), ("gpu.kernel.block.x", "block_x"),
                     ("gpu.kernel.block.y", "block_y"), ("gpu.kernel.block.z", "block_z"),
                     ("gpu.kernel.registers", "registers"), ("gpu.kernel.shared_memory", "shared_mem")):
        cols.add_present(key, ev_span[kern], batch.columns[col][ev][kern].astype(np.int64))
    cols.add_present("gpu.graph.id", ev_span[kern], batch.graph_id[ev][kern])
    ops = np.flatnonzero(np.isin(kind, np.asarray(GPU_OP_KINDS, np.uint8)))
    if len(ops):
        # Classify each distinct (kind, name) once, then map back to every op.
        op_rows = ev[ops]
        keys = (batch.kind[op_rows].astype(np.int64) << 32) | batch.name[op_rows].astype(np.int64)
        _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        klass = classify(batch, op_rows[first])[inverse]
        class_ids = np.array([cols.value_id(c) for c in KERNEL_CLASSES], np.int64)
        cols.add("gpu.kernel.class", "value", ev_span[ops], class_ids[klass])
    mem = np.flatnonzero(np.isin(kind, np.asarray([Kind.MEMCPY, Kind.MEMSET], np.uint8)))
    nbytes = batch.bytes[ev][mem]
    cols.add_present("gpu.memory.bytes", ev_span[mem], nbytes)
    d = batch.duration_ns[ev][mem]
    bw = np.flatnonzero((nbytes >= 0) & (d > 0))
    cols.add("gpu.memory.bandwidth_gbps", "double", ev_span[mem][bw], nbytes[bw] / d[bw])
    copy = np.flatnonzero(kind == Kind.MEMCPY)
    sub = batch.subkind[ev][copy]
    copy_ids = np.array([cols.value_id(m.name) for m in MemcpyKind], np.int64)
    cols.add("gpu.memcpy.kind", "value", ev_span[copy], copy_ids[np.minimum(sub, len(MemcpyKind) - 1)])
    sync = np.flatnonzero(kind == Kind.SYNC)
    sub = batch.subkind[ev][sync]
    sync_ids = np.array([cols.value_id(s.name.lower()) for s in SyncKind], np.int64)
    cols.add("gpu.sync.kind", "value", ev_span[sync], sync_ids[np.minimum(sub, len(SyncKind) - 1)])


def resource_attributes(meta: dict[str, Any], opt: SpanOptions, run_id: str, rank: int) -> dict[str, Any]:
    """Resource of one rank: service, host, process, rank, run, framework and CUDA versions."""
    res: dict[str, Any] = {}
    res.update(opt.resource_attributes)
    res.update(meta.get("resource") or {})  # what a live session recorded (otel_profiler.live.resource)
    res["service.name"] = opt.service_name or res.get("service.name") or meta.get("service_name") or \
        opt.default_service or "otel-profiler"
    if meta.get("host_name"):
        res["host.name"] = str(meta["host_name"])
    if meta.get("pid") is not None:
        res["process.pid"] = int(meta["pid"])
    res["otel_profiler.rank"] = rank
    if int(meta.get("world_size", -1) or -1) > 0:
        res["otel_profiler.world_size"] = int(meta["world_size"])
    res["otel_profiler.run.id"] = run_id
    if meta.get("source"):
        res["otel_profiler.source"] = str(meta["source"])
    versions = meta.get("versions") or {}
    names = {"cuda_runtime": "gpu.cuda.runtime_version", "cuda_driver": "gpu.cuda.driver_version",
             "cupti": "gpu.cupti.version", "torch": "otel_profiler.framework.torch.version",
             "tensorflow": "otel_profiler.framework.tensorflow.version",
             "python": "process.runtime.version"}
    for key, value in versions.items():
        if value is not None and key != "schema":
            res[names.get(key, f"otel_profiler.version.{key}")] = str(value)
    if meta.get("framework"):
        res["otel_profiler.framework.name"] = str(meta["framework"])
    devices = [d.get("name") for d in meta.get("device_properties") or [] if isinstance(d, dict)]
    if any(devices):
        res["gpu.device.names"] = [str(d) for d in devices]
    res["telemetry.sdk.name"] = "otel-profiler"
    res["telemetry.sdk.language"] = "python"
    res["telemetry.sdk.version"] = version()
    return res


def version() -> str:
    try:
        from ..version import __version__
        return str(__version__)
    except ImportError:  # pragma: no cover
        return "0"
