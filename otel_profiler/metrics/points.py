"""The metric catalogue: every metric's OpenTelemetry name, unit, instrument, labels and meaning, and
the Prometheus name each one gets.

Samplers (``system``) and the profile aggregator (``profile``) produce
:class:`Point` values for the :class:`Spec` objects declared here; the Prometheus endpoint
(``prometheus``) and the OTLP encoder (``metrics_otlp``) only translate points. The README's metric
table is generated from this module (``python -m otel_profiler.metrics.points``).

Names follow the OpenTelemetry semantic conventions where one exists (``hw.gpu.*``, ``hw.power`` /
``hw.energy`` / ``hw.temperature`` with ``hw.type=gpu``, ``system.*``, ``process.*``); everything
else lives in this project's namespace ``otel_profiler.*``. GPU system metrics carry ``hw.id`` = the
NVML UUID (``GPU-…``), the value of DCGM exporter's ``UUID`` label, so both join. Kernel names are
never labels (cardinality): they live on spans.

Prometheus names follow the OTel→Prometheus compatibility rules: characters outside
``[a-zA-Z0-9_:]`` become ``_``, the unit becomes a suffix (``By``→``bytes``, ``s``→``seconds``,
``W``→``watts``, ``J``→``joules``, ``Cel``→``celsius``, ``Hz``→``hertz``, ``By/s``→
``bytes_per_second``, ``1``→``ratio`` for gauges; ``{…}`` annotations are dropped), and monotonic
counters end in ``_total``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

GAUGE, COUNTER, UPDOWN, HISTOGRAM = "gauge", "counter", "updowncounter", "histogram"

_UNIT_WORDS = {"By": "bytes", "s": "seconds", "W": "watts", "J": "joules", "Cel": "celsius",
               "Hz": "hertz", "%": "percent", "By/s": "bytes_per_second"}


def prometheus_name(name: str, unit: str, kind: str) -> str:
    """The Prometheus metric name of an OTel metric (without the ``_bucket``/``_sum`` of histograms)."""
    base = re.sub(r"_+", "_", re.sub(r"[^a-zA-Z0-9_:]", "_", name))
    word = "" if unit.startswith("{") else _UNIT_WORDS.get(unit, "")
    if unit == "1" and kind == GAUGE:
        word = "ratio"
    if word and not base.endswith("_" + word):
        base = f"{base}_{word}"
    if kind == COUNTER and not base.endswith("_total"):
        base += "_total"
    return base


def prometheus_label(attribute: str) -> str:
    return re.sub(r"_+", "_", re.sub(r"[^a-zA-Z0-9_]", "_", attribute))


@dataclass(frozen=True)
class Spec:
    """One metric: OTel name, unit (UCUM), instrument kind, attribute keys, meaning, source."""

    name: str
    unit: str
    kind: str
    labels: tuple[str, ...]
    doc: str
    source: str  # nvml | psutil | profile | exporter
    buckets: tuple[float, ...] = ()  # histograms: upper bounds (the +Inf bucket is implied)

    @property
    def prometheus(self) -> str:
        return prometheus_name(self.name, self.unit, self.kind)


@dataclass
class Point:
    """One value of one metric for one attribute set. ``value`` is a float, or a
    :class:`HistogramValue` for histograms."""

    spec: Spec
    attributes: dict[str, Any]
    value: Any


@dataclass
class HistogramValue:
    """Cumulative histogram: per-bucket counts (len(bounds)+1, last = +Inf), sum, and per bucket the
    exemplar of its latest observation that had one (``(trace_id_hex, value, unix_seconds)``)."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    exemplars: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)
            self.exemplars = [None] * (len(self.bounds) + 1)

    @property
    def count(self) -> int:
        return sum(self.counts)

    def copy(self) -> "HistogramValue":
        return HistogramValue(self.bounds, list(self.counts), self.total, list(self.exemplars))


@dataclass
class MetricsSnapshot:
    """Every current point of one process, as handed to the exporter process for OTLP: cumulative
    values since ``start_ns`` (when the process's metrics started), taken at ``time_ns``."""

    resource: dict[str, Any]
    points: list[Point]
    start_ns: int
    time_ns: int


CATALOGUE: list[Spec] = []


def metric(name: str, unit: str, kind: str, labels: tuple[str, ...], doc: str, source: str,
           buckets: tuple[float, ...] = ()) -> Spec:
    spec = Spec(name, unit, kind, labels, doc, source, buckets)
    CATALOGUE.append(spec)
    return spec


_GPU = ("hw.id", "hw.name", "hw.vendor")
_HW = ("hw.id", "hw.name", "hw.vendor", "hw.type")

# ---------------------------------------------------------------- GPU, through NVML (system_metrics)
GPU_UTILIZATION = metric("hw.gpu.utilization", "1", GAUGE, _GPU + ("hw.gpu.task",),
                         "Fraction of time a kernel ran (NVML utilization.gpu / 100).", "nvml")
GPU_MEMORY_UTILIZATION = metric("hw.gpu.memory.utilization", "1", GAUGE, _GPU,
                                "Fraction of GPU memory in use (used / total).", "nvml")
GPU_MEMORY_USAGE = metric("hw.gpu.memory.usage", "By", UPDOWN, _GPU, "GPU memory in use.", "nvml")
GPU_MEMORY_LIMIT = metric("hw.gpu.memory.limit", "By", UPDOWN, _GPU, "Total GPU memory.", "nvml")
GPU_POWER = metric("hw.power", "W", GAUGE, _HW, "Power draw (hw.type=gpu).", "nvml")
GPU_ENERGY = metric("hw.energy", "J", COUNTER, _HW,
                    "Energy consumed since the driver loaded (hw.type=gpu).", "nvml")
GPU_TEMPERATURE = metric("hw.temperature", "Cel", GAUGE, _HW, "GPU die temperature (hw.type=gpu).", "nvml")
GPU_CLOCK = metric("otel_profiler.gpu.clock.frequency", "Hz", GAUGE, _GPU + ("otel_profiler.gpu.clock",),
                   "Current clock: otel_profiler.gpu.clock = sm or memory.", "nvml")
GPU_COPY_UTILIZATION = metric("otel_profiler.gpu.memory_bandwidth.utilization", "1", GAUGE, _GPU,
                              "Fraction of time device memory was read or written (NVML "
                              "utilization.memory, DCGM MEM_COPY_UTIL).", "nvml")
GPU_PCIE = metric("otel_profiler.gpu.pcie.throughput", "By/s", GAUGE, _GPU + ("network.io.direction",),
                  "PCIe throughput over NVML's last 20 ms (receive / transmit).", "nvml")
GPU_PROCESS_UTILIZATION = metric("otel_profiler.gpu.process.utilization", "1", GAUGE,
                                 _GPU + ("process.pid",),
                                 "SM utilization of one process on the GPU (NVML per-process samples).",
                                 "nvml")
GPU_PROCESS_MEMORY = metric("otel_profiler.gpu.process.memory.usage", "By", UPDOWN, _GPU + ("process.pid",),
                            "GPU memory used by one process.", "nvml")
GPU_GPM = metric("otel_profiler.gpu.activity", "1", GAUGE, _GPU + ("otel_profiler.gpu.unit",),
                 "Hopper+ GPM ratios: otel_profiler.gpu.unit = sm (SM active), sm_occupancy, tensor "
                 "(any tensor pipe), dram (DRAM bandwidth); DCGM PROF_* equivalents.", "nvml")

# ---------------------------------------------------------------- CPU, through psutil (system_metrics)
SYSTEM_CPU_UTILIZATION = metric("system.cpu.utilization", "1", GAUGE, ("cpu.mode",),
                                "Whole-machine CPU time fraction per mode (user, system, idle, "
                                "iowait, nice, interrupt, steal).", "psutil")
CORE_UTILIZATION = metric("otel_profiler.cpu.core.utilization", "1", GAUGE, ("cpu.logical_number",),
                          "Busy fraction (1 - idle - iowait) of each logical CPU.", "psutil")
PROCESS_CPU_UTILIZATION = metric("process.cpu.utilization", "1", GAUGE, ("cpu.mode",),
                                 "This process's CPU time per mode (user, system) since the last "
                                 "tick / elapsed time / CPUs available.", "psutil")
PROCESS_MEMORY = metric("process.memory.usage", "By", UPDOWN, (), "Resident memory of this process.",
                        "psutil")
SYSTEM_MEMORY = metric("system.memory.usage", "By", UPDOWN, ("system.memory.state",),
                       "Machine memory by state (used, free, cached, buffers).", "psutil")
SYSTEM_MEMORY_UTILIZATION = metric("system.memory.utilization", "1", GAUGE, (),
                                   "Fraction of machine memory in use.", "psutil")
NETWORK_IO = metric("system.network.io", "By", COUNTER, ("network.io.direction",),
                    "Bytes received / transmitted, all interfaces.", "psutil")
DISK_IO = metric("system.disk.io", "By", COUNTER, ("disk.io.direction",),
                 "Bytes read / written, all disks.", "psutil")

# ---------------------------------------------------------------- from events (profile_metrics)
_DEV = ("otel_profiler.rank", "gpu.device.id")
DELAY_BUCKETS = (1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 1e-2, 0.1, 1.0)
STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

GPU_BUSY = metric("otel_profiler.gpu.busy", "1", GAUGE, _DEV,
                  "Merged GPU-op time / device span in the latest batch with ops on the device "
                  "(HTA temporal breakdown: 1 - idle fraction).", "profile")
GPU_BUSY_TIME = metric("otel_profiler.gpu.busy.time", "s", COUNTER, _DEV,
                       "Merged GPU-op time (union over streams), summed over batches.", "profile")
GPU_SPAN_TIME = metric("otel_profiler.gpu.span.time", "s", COUNTER, _DEV,
                       "Device span (first op start to last op end), summed over batches; "
                       "rate(busy)/rate(span) is the busy ratio over any range.", "profile")
KERNEL_TIME = metric("otel_profiler.gpu.kernel.time", "s", COUNTER, ("otel_profiler.rank", "gpu.kernel.class"),
                     "Summed GPU-op time per class: compute, communication (NCCL/RCCL/HCCL), memory "
                     "(memcpy, memset).", "profile")
LAUNCH_DELAY = metric("otel_profiler.gpu.launch.delay", "s", HISTOGRAM, ("otel_profiler.rank",),
                      "gpu.start - (launch.start + launch.duration), clipped at 0 (HTA).", "profile",
                      DELAY_BUCKETS)
LAUNCH_LATENCY = metric("otel_profiler.gpu.launch.latency", "s", HISTOGRAM, ("otel_profiler.rank",),
                        "gpu.start - launch.start (Nsight Systems).", "profile", DELAY_BUCKETS)
MEMCPY_BYTES = metric("otel_profiler.gpu.memcpy.io", "By", COUNTER, ("otel_profiler.rank", "gpu.memcpy.kind"),
                      "Bytes copied per direction (HtoD, DtoH, DtoD, PtoP, HtoH, unknown).", "profile")
MEMCPY_TIME = metric("otel_profiler.gpu.memcpy.time", "s", COUNTER, ("otel_profiler.rank", "gpu.memcpy.kind"),
                     "Summed copy time per direction.", "profile")
MEMCPY_THROUGHPUT = metric("otel_profiler.gpu.memcpy.throughput", "By/s", GAUGE,
                           ("otel_profiler.rank", "gpu.memcpy.kind"),
                           "Bytes / copy time per direction in the latest batch with copies.", "profile")
SYNC_TIME = metric("otel_profiler.gpu.sync.time", "s", COUNTER, ("otel_profiler.rank", "gpu.sync.kind"),
                   "Time in synchronization records per kind (stream, event, context, "
                   "stream_wait_event, unknown).", "profile")
STEP_DURATION = metric("otel_profiler.step.duration", "s", HISTOGRAM, ("otel_profiler.rank",),
                       "Training step time; exemplars carry the step's trace_id (the trace id of its "
                       "exported train.step span).", "profile", STEP_BUCKETS)
FLOPS = metric("otel_profiler.flops", "{flop}", COUNTER, ("otel_profiler.rank", "otel_profiler.op.class"),
               "Floating-point operations of the operators recorded with shapes (CPU ops in detailed "
               "windows), per class: gemm, conv, attention, elementwise, other (the summary's flops "
               "section).", "profile")
STEP_MFU = metric("otel_profiler.step.mfu", "1", GAUGE, ("otel_profiler.rank",),
                  "Model FLOPs utilization of the latest step whose operators were recorded with shapes: "
                  "its FLOPs over what the rank's GPUs could do in the step at the device's peak (the "
                  "summary's flops.by_step).", "profile")
QUEUE_DEPTH = metric("otel_profiler.gpu.stream.queue_depth", "{operation}", GAUGE,
                     _DEV + ("gpu.stream.id",),
                     "Maximum launched-but-not-started GPU ops of a stream in the latest batch (HTA).",
                     "profile")
GPU_MEMORY_PEAK_ALLOCATED = metric(
    "otel_profiler.gpu.memory.peak_allocated", "By", GAUGE, _DEV,
    "Peak GPU memory held by tensors in the latest profiled step (from the allocator's [memory] "
    "events, or torch.cuda.max_memory_allocated per step with OTEL_PROFILER_ACTIVITIES=memory).", "profile")
GPU_MEMORY_PEAK_RESERVED = metric(
    "otel_profiler.gpu.memory.peak_reserved", "By", GAUGE, _DEV,
    "Peak GPU memory reserved by the caching allocator in the latest profiled step (same sources).",
    "profile")
RUN_INFO = metric("otel_profiler.run.info", "{run}", GAUGE, ("otel_profiler.run.id",),
                  "1 for the run a process profiles: join on (job, instance) to pick one run's series "
                  "(the Run comparison dashboard).", "profile")
EVENTS = metric("otel_profiler.events", "{event}", COUNTER, ("otel_profiler.rank", "otel_profiler.kind"),
                "Events observed per kind (kernel, memcpy, runtime, step, ...).", "profile")
DROPPED = metric("otel_profiler.events.dropped", "{event}", COUNTER, ("otel_profiler.reason",),
                 "Events or batches lost: cupti_dropped_records, skipped_records, "
                 "export_batches_dropped, export_spans_dropped, ...", "profile")
OVERHEAD = metric("otel_profiler.overhead.time", "s", COUNTER, ("otel_profiler.component",),
                  "CPU time the profiler's metrics spent: sampler (ticks), profile (batch "
                  "aggregation), scrape (Prometheus exposition).", "profile")
EXPORTER_QUEUE = metric("otel_profiler.exporter.queue.size", "{batch}", UPDOWN, (),
                        "Batches handed to the exporter process and not yet taken by it (a full "
                        "queue drops batches: OTEL_PROFILER_EXPORT_QUEUE).", "exporter")
SPOOL_SIZE = metric("otel_profiler.exporter.spool.size", "By", UPDOWN, (),
                    "OTLP requests waiting in the spool for the endpoint to come back "
                    "(OTEL_PROFILER_SPOOL_MAX_MB bounds it).", "exporter")


def markdown_table() -> str:
    """README table: every metric with unit, type, labels and its Prometheus name."""
    lines = ["| OTel name | unit | type | labels | Prometheus name | meaning |", "|---|---|---|---|---|---|"]
    for s in CATALOGUE:
        labels = ", ".join(f"`{k}`" for k in s.labels) or "-"
        lines.append(f"| `{s.name}` | `{s.unit}` | {s.kind} | {labels} | `{s.prometheus}` | {s.doc} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_table())
