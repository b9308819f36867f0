"""The span attributes: ``ATTRIBUTES``, the list the span builder emits them from (in this order),
and the resource of a rank. ``python -m otel_profiler.spans.attributes`` prints the attribute table
of docs/spans.md.

Names follow the OpenTelemetry semantic conventions where one exists (``service.name``,
``host.name``, ``process.pid``, ``thread.id``); no ``gpu.*`` or ``cuda.*`` convention exists,
so ``gpu.*`` here is this project's namespace for GPU facts and ``otel_profiler.*`` for profiler
bookkeeping.

An entry with a ``column`` copies that EventBatch column onto the individual spans of its
``carriers`` where the value is not missing: a kernel-span attribute from a new column is one entry.
Any other entry names the function of ``derived`` that sets it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..shared.service_name import service_name
from . import derived
from .columns import KIND_NAMES, AttrColumn, Columns
from .layout import SpanLayout
from .options import SpanOptions

__all__ = ["ATTRIBUTES", "ATTRIBUTE_NAMES", "AttrColumn", "Columns", "KIND_NAMES", "SpanAttribute", "emit_attributes",
           "resource_attributes", "version"]

EVENT_SPANS = ("annotation", "torch_range", "gpu_annotation", "cpu_op", "runtime", "driver", "kernel", "memcpy", "memset",
               "sync")
"""``otel_profiler.kind`` of the spans of single events."""
ROOTS = ("step", "window")
AGGREGATE = "aggregate"
"""Carrier name of aggregate spans (``otel_profiler.aggregated``; their kind is the events' kind)."""
RUN = "run"
"""Carrier name of a rank's run span (``context``: joined traces only)."""
GPU_OPS = ("kernel", "memcpy", "memset")
_KIND_OF_NAME = {name: kind for kind, name in KIND_NAMES.items()}


@dataclass(frozen=True)
class SpanAttribute:
    """One span attribute: its name and type, the spans that carry it (``otel_profiler.kind`` values,
    ``aggregate``, ``run``), where its value comes from and what it means.

    ``type``: ``int``, ``double``, ``bool``, ``string`` or ``string[]``. ``column``: the EventBatch
    column copied onto individual spans of the carriers; else ``derive`` sets it and ``how`` says
    from what. ``when``: a condition beyond the span kind (empty: always there on its carriers).
    """

    name: str
    type: str
    carriers: tuple[str, ...]
    description: str
    column: str = ""
    derive: derived.Derivation | None = None
    how: str = ""
    when: str = ""

    @property
    def source(self) -> str:
        return f"column `{self.column}`" if self.column else self.how

    def emit(self, layout: SpanLayout, columns: Columns) -> None:
        """Set this attribute on the spans of ``layout`` that carry it."""
        if self.derive is not None:
            self.derive(self.name, layout, columns)
            return
        kinds = np.asarray([_KIND_OF_NAME[c] for c in self.carriers if c in _KIND_OF_NAME], np.uint8)
        rows = layout.event_rows
        mine = np.flatnonzero(np.isin(layout.batch.kind[rows], kinds))
        columns.add_present(self.name, layout.event_spans[mine],
                            layout.batch.columns[self.column][rows][mine].astype(np.int64))


def _column(name: str, column: str, carriers: tuple[str, ...], description: str, when: str = "") -> SpanAttribute:
    return SpanAttribute(name, "int", carriers, description, column=column, when=when)


def _derived(name: str, type_: str, carriers: tuple[str, ...], derive: derived.Derivation, how: str,
             description: str, when: str = "") -> SpanAttribute:
    return SpanAttribute(name, type_, carriers, description, derive=derive, how=how, when=when)


_LAUNCH_HOW = "start of the event and of its launch call"
_KERNEL = ("kernel",)
_DEVICE_SIDE = GPU_OPS + ("sync", "gpu_annotation")

ATTRIBUTES: tuple[SpanAttribute, ...] = (
    _derived("otel_profiler.kind", "string", ROOTS + EVENT_SPANS + (AGGREGATE, RUN), derived.span_kind,
             "column `kind`", "what the span is: step, window, annotation, torch_range (one of torch's own "
             "ranges: Optimizer.step#..., enumerate(DataLoader)#..., compiled regions), gpu_annotation, cpu_op, "
             "runtime, driver, kernel, memcpy, memset, sync, run (an aggregate span: the kind of its events)"),
    # root spans
    _derived("otel_profiler.step", "int", ("step",), derived.step_number, "the STEP event's name",
             "training step number"),
    _derived("otel_profiler.window.start_ns", "int", ("window",), derived.window_start,
             "`OTEL_PROFILER_SPAN_WINDOW_S`", "start of the window of a window trace"),
    _derived("otel_profiler.rank", "int", ROOTS + (RUN,), derived.rank, "metadata, else column `rank`",
             "distributed rank (also a resource attribute)"),
    _derived("otel_profiler.run.id", "string", ROOTS + (RUN,), derived.run_id,
             "`OTEL_PROFILER_RUN_ID` or the metadata", "run id shared by all ranks of a job (also a resource "
             "attribute)"),
    _derived("otel_profiler.span_budget", "int", ROOTS, derived.span_budget, "`OTEL_PROFILER_SPAN_BUDGET`",
             "the span budget of the trace"),
    _derived("otel_profiler.spans.individual", "int", ROOTS, derived.individual_spans, "the span budget",
             "events exported as individual spans in this trace (and batch)"),
    _derived("otel_profiler.spans.aggregated_events", "int", ROOTS, derived.aggregated_events,
             "the span budget", "events counted in aggregate spans of this trace (and batch)"),
    _derived("otel_profiler.span_selection", "string", ROOTS, derived.span_selection, "the span budget",
             "how individual spans were chosen"),
    _derived("otel_profiler.top_kernels", "string[]", ROOTS, derived.top_kernels,
             "columns `name`, `start_ns`, `end_ns` of kernels", "names of the kernels with the most GPU time "
             "in the trace (demangled)", when="the trace has kernels"),
    _derived("otel_profiler.top_operators", "string[]", ROOTS, derived.top_operators,
             "CPU ops and their kernels (`analysis.step_figures`)", "PyTorch operators whose kernels took the "
             "most GPU time in the trace, innermost operator that launched each kernel",
             when="the trace has CPU ops that launched kernels"),
    _derived("otel_profiler.top_operator", "string", ROOTS, derived.top_operator,
             "CPU ops and their kernels (`analysis.step_figures`)", "the first of otel_profiler.top_operators, "
             "as one string a trace search can match", when="the trace has CPU ops that launched kernels"),
    _derived("otel_profiler.flops", "double", ROOTS, derived.flops, "CPU ops' recorded input shapes "
             "(`analysis.flops`)", "floating-point operations of the operators in the trace, each counted once",
             when="operators were recorded with shapes"),
    _derived("otel_profiler.mfu", "double", ("step",), derived.mfu, "otel_profiler.flops, the step's time, "
             "the device's peak", "model FLOPs utilization of the step: its FLOPs over what the rank's GPUs could "
             "do in the step's time at the device's peak (0-1)", when="the device's peak is known"),
    _derived("gpu.memory.peak_allocated_bytes", "int", ROOTS, derived.peak_allocated, "[memory] events",
             "largest allocated GPU memory in the trace", when="memory is recorded"),
    _derived("gpu.memory.peak_reserved_bytes", "int", ROOTS, derived.peak_reserved, "[memory] events",
             "largest GPU memory reserved by the caching allocator in the trace", when="memory is recorded"),
    # individual spans
    _column("thread.id", "tid", EVENT_SPANS, "(semantic convention) CPU thread of an annotation, CPU op or "
            "API call", when="the event has a thread"),
    _column("gpu.device.id", "device", _DEVICE_SIDE, "GPU index"),
    _column("gpu.stream.id", "stream", _DEVICE_SIDE, "CUDA stream"),
    _column("gpu.correlation.id", "correlation", EVENT_SPANS, "CUPTI correlation id linking a GPU op to its "
            "launch call", when="the event has one"),
    _derived("gpu.api.synchronizing", "bool", ("runtime", "driver"), derived.synchronizing, "column `name`",
             "true on runtime/driver calls that block the CPU until the GPU is done "
             "(`cuda*Synchronize`, `cu*Synchronize`)", when="the call synchronizes"),
    _derived("gpu.launch.latency_ns", "int", GPU_OPS + ("sync",), derived.launch_latency, _LAUNCH_HOW,
             "launch latency (Nsight): GPU start - launch call start", when="the launch call is known"),
    _derived("gpu.launch.delay_ns", "int", GPU_OPS + ("sync",), derived.launch_delay, _LAUNCH_HOW,
             "launch delay (HTA): GPU start - launch call end, clipped at 0", when="the launch call is known"),
    _column("gpu.kernel.grid.x", "grid_x", _KERNEL, "launch geometry: grid size in x"),
    _column("gpu.kernel.grid.y", "grid_y", _KERNEL, "launch geometry: grid size in y"),
    _column("gpu.kernel.grid.z", "grid_z", _KERNEL, "launch geometry: grid size in z"),
    _column("gpu.kernel.block.x", "block_x", _KERNEL, "launch geometry: block size in x"),
    _column("gpu.kernel.block.y", "block_y", _KERNEL, "launch geometry: block size in y"),
    _column("gpu.kernel.block.z", "block_z", _KERNEL, "launch geometry: block size in z"),
    _column("gpu.kernel.registers", "registers", _KERNEL, "registers per thread"),
    _column("gpu.kernel.shared_memory", "shared_memory", _KERNEL, "shared memory bytes (static + dynamic)"),
    _column("gpu.graph.id", "graph_id", _KERNEL, "CUDA graph that ran the kernel", when="run by a CUDA graph"),
    _derived("gpu.kernel.class", "string", GPU_OPS, derived.kernel_class, "columns `kind`, `name`",
             "compute, communication or memory"),
    _column("gpu.memory.bytes", "bytes", ("memcpy", "memset"), "bytes copied or set"),
    _derived("gpu.memory.bandwidth_gbps", "double", ("memcpy", "memset"), derived.bandwidth,
             "columns `bytes`, `start_ns`, `end_ns`", "bytes / duration, in GB/s (1e9 bytes per second)",
             when="bytes are known"),
    _derived("gpu.memcpy.kind", "string", ("memcpy",), derived.memcpy_kind, "column `subkind`",
             "copy direction: HtoD, DtoH, DtoD, PtoP, HtoH (UNKNOWN when not recorded)"),
    _derived("gpu.sync.kind", "string", ("sync",), derived.sync_kind, "column `subkind`",
             "what a sync waited for: stream, event, context, stream_wait_event (unknown when not recorded)"),
    # aggregate spans
    _derived("otel_profiler.aggregated", "bool", (AGGREGATE,), derived.aggregated, "the span budget",
             "true on aggregate spans"),
    _derived("otel_profiler.aggregate.count", "int", (AGGREGATE,), derived.aggregate_count, "the span budget",
             "events counted in an aggregate span"),
    _derived("otel_profiler.aggregate.duration_ns", "int", (AGGREGATE,), derived.aggregate_duration,
             "columns `start_ns`, `end_ns`", "summed duration of those events"),
    _derived("otel_profiler.aggregate.max_duration_ns", "int", (AGGREGATE,), derived.aggregate_max_duration,
             "columns `start_ns`, `end_ns`", "longest of those events"),
    _derived("gpu.memory.bytes", "int", (AGGREGATE,), derived.aggregate_bytes, "column `bytes`, summed",
             "bytes copied or set, summed over the aggregated copies or memsets",
             when="the events are copies or memsets"),
    # every span with a name from the trace
    _derived("otel_profiler.raw_name", "string", EVENT_SPANS + (AGGREGATE,), derived.raw_name, "column `name`",
             "the name as the trace recorded it, where the span name is its demangled form (C++ symbols "
             "such as _ZN7ck_tile6kentry...)", when="the name is a mangled C++ symbol"),
)
"""Every attribute a span can carry, in the order the builder sets them (one name may appear twice, on
disjoint carriers: ``gpu.memory.bytes`` on copies and on their aggregates)."""
ATTRIBUTE_NAMES = frozenset(attribute.name for attribute in ATTRIBUTES)


def emit_attributes(layout: SpanLayout) -> Columns:
    """The attribute columns of every span of ``layout``, set from :data:`ATTRIBUTES` in order."""
    columns = Columns(len(layout))
    for attribute in ATTRIBUTES:
        attribute.emit(layout, columns)
    return columns


def _carriers_text(carriers: tuple[str, ...]) -> str:
    rest = list(carriers)
    words = []
    for group, text in ((ROOTS + EVENT_SPANS + (AGGREGATE, RUN), "every span"), (EVENT_SPANS, "every event span")):
        if all(c in rest for c in group):
            words.append(text)
            rest = [c for c in rest if c not in group]
    return ", ".join(words + rest)


def markdown_table() -> str:
    """The attribute table of docs/spans.md: one row per name (entries of one name merged)."""
    rows: dict[str, list[SpanAttribute]] = {}
    for attribute in ATTRIBUTES:
        rows.setdefault(attribute.name, []).append(attribute)
    lines = ["| Attribute | Type | Spans | From | Meaning |", "|---|---|---|---|---|"]
    for name, entries in rows.items():
        carriers = tuple(c for entry in entries for c in entry.carriers)
        source = "; ".join(entry.source if len(entries) == 1 else f"{_carriers_text(entry.carriers)}: {entry.source}"
                           for entry in entries)
        meaning = entries[0].description + (f"; only when {entries[0].when}" if entries[0].when else "")
        lines.append(f"| `{name}` | {entries[0].type} | {_carriers_text(carriers)} | {source} | {meaning} |")
    return "\n".join(lines)


def resource_attributes(meta: Mapping[str, Any], opt: SpanOptions, run_id: str, rank: int) -> dict[str, Any]:
    """Resource of one rank: service, host, process, rank, run, framework and CUDA versions."""
    res: dict[str, Any] = {}
    res.update(opt.resource_attributes)
    res.update(meta.get("resource") or {})  # what a live session recorded (otel_profiler.live.resource)
    res["service.name"] = service_name(opt.service_name, res, meta.get("service_name"), opt.default_service)
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


if __name__ == "__main__":
    sys.stdout.write(markdown_table() + "\n")
