"""*Training overview*: the SageMaker Profiler dashboard's equivalents. GPU and CPU utilization per
node and GPU, GPU and CPU active time, step time (over time and as a histogram with exemplars),
model FLOPs utilization and FLOPs by operator class, GPU time by activity and by kernel class,
memcpy throughput by direction, launch delay/latency percentiles, GPU memory, power and the host's
memory and I/O."""

from __future__ import annotations

from otel_profiler.metrics import points as m

from .panels import Panel, Query
from .promql import RANGE, rate, series, sum_by
from .recipes import (gauge, gpu_gauge, histogram_bars, histogram_heatmap, over_range, per_second,
                      percentiles, range_average)

UID, TITLE = "otel-profiler-overview", "otel-profiler / Training overview"
DESCRIPTION = "GPU and CPU utilization, step time, GPU time breakdown, copies, launches, memory, power."

MEMORY_CLASS = 'gpu_kernel_class="memory"'
_DEVICE = "otel_profiler_rank, gpu_device_id"


def _busy_ratio() -> Query:
    by = "otel_profiler_rank, gpu_device_id"
    busy = sum_by(by, rate(m.GPU_BUSY_TIME))
    span = sum_by(by, rate(m.GPU_SPAN_TIME))
    return Query(f"{busy} / {span}", "rank {{otel_profiler_rank}} GPU {{gpu_device_id}} (profiled)")


def _activity_pie() -> Panel:
    """GPU time by activity: kernels, memcpy + memset, sync (increase over the range)."""
    parts = (("kernels", rate(m.KERNEL_TIME, RANGE, "increase", gpu_kernel_class='!="memory"')),
             ("memcpy + memset", rate(m.KERNEL_TIME, RANGE, "increase", gpu_kernel_class='="memory"')),
             ("sync", rate(m.SYNC_TIME, RANGE, "increase")))
    return Panel("GPU time by activity", "piechart",
                 tuple(Query(f"sum({expr})", name, instant=True) for name, expr in parts), "s",
                 "Kernels / memcpy + memset / synchronization, over the time range (profiled windows).")


def _memcpy_throughput() -> Panel:
    by = "gpu_memcpy_kind"
    moved = sum_by(by, rate(m.MEMCPY_BYTES))
    busy = sum_by(by, rate(m.MEMCPY_TIME))
    latest = sum_by(by, series(m.MEMCPY_THROUGHPUT), "max")
    return Panel("Memcpy throughput by direction", "timeseries",
                 (Query(moved, "{{gpu_memcpy_kind}} bytes/s moved"),
                  Query(f"{moved} / {busy}", "{{gpu_memcpy_kind}} bandwidth while copying"),
                  Query(latest, "{{gpu_memcpy_kind}} latest batch")), "Bps",
                 "Bytes copied per second of wall time, and bytes per second of copy time, per direction.")


def rows() -> list[tuple[str, list[Panel]]]:
    """The dashboard's rows and their panels."""
    return [
        ("Utilization", [
            gpu_gauge("GPU utilization per node and GPU", m.GPU_UTILIZATION, "percentunit"),
            Panel("CPU utilization per node and training process", "timeseries",
                  (Query(sum_by("host_name", series(m.CORE_UTILIZATION), "avg"), "{{host_name}} all cores"),
                   Query(sum_by("host_name, instance", series(m.PROCESS_CPU_UTILIZATION)),
                         "{{host_name}} {{instance}} process")), "percentunit",
                  "Average busy fraction of the node's cores, and each profiled process's share of them."),
            range_average("GPU active (range average)", m.GPU_UTILIZATION, "host_name, hw_id"),
            range_average("CPU active (range average)", m.CORE_UTILIZATION, "host_name"),
            over_range("GPU active time (profiled)", m.GPU_BUSY_TIME, "s", "otel_profiler_rank, gpu_device_id"),
            Panel("GPU busy ratio (profiled)", "timeseries", (_busy_ratio(),), "percentunit",
                  "Merged GPU-op time / device span in profiled windows (HTA temporal breakdown).", width=6),
            gauge("CPU time by mode (machine)", m.SYSTEM_CPU_UTILIZATION, "percentunit", "host_name, cpu_mode",
                  cpu_mode='!="idle"'),
        ]),
        ("Steps", [
            percentiles("Step time", m.STEP_DURATION, (0.5, 0.95), "job, otel_profiler_rank", exemplar=True,
                        trace_links=True),
            histogram_heatmap("Step time histogram (exemplars → traces)", m.STEP_DURATION),
            histogram_bars("Step time distribution (range)", m.STEP_DURATION),
            per_second("Steps per second", m.EVENTS, "short", "job, otel_profiler_rank", otel_profiler_kind='="step"'),
            gauge("Model FLOPs utilization (latest profiled step)", m.STEP_MFU, "percentunit", "job, otel_profiler_rank",
                  "max"),
            per_second("FLOPs by operator class (profiled)", m.FLOPS, "flops", "otel_profiler_op_class", stacked=True),
        ]),
        ("GPU time", [
            _activity_pie(),
            over_range("GPU time by kernel class", m.KERNEL_TIME, "s", "gpu_kernel_class", kind="piechart"),
            _memcpy_throughput(),
            per_second("Synchronization time by kind", m.SYNC_TIME, "s", "gpu_sync_kind", stacked=True),
            percentiles("Launch delay percentiles (HTA)", m.LAUNCH_DELAY),
            percentiles("Launch latency percentiles (Nsight)", m.LAUNCH_LATENCY),
            gauge("Stream queue depth (max per batch)", m.QUEUE_DEPTH, "short",
                  "otel_profiler_rank, gpu_device_id, gpu_stream_id", "max"),
        ]),
        ("GPU memory and power", [
            Panel("GPU memory", "timeseries",
                  (Query(sum_by("host_name, hw_id", series(m.GPU_MEMORY_USAGE)), "{{host_name}} {{hw_id}} used"),
                   Query(sum_by("host_name, hw_id", series(m.GPU_MEMORY_LIMIT)), "{{host_name}} {{hw_id}} total")),
                  "bytes", "GPU memory in use and in total (NVML)."),
            gpu_gauge("GPU memory in use (fraction)", m.GPU_MEMORY_UTILIZATION, "percentunit"),
            Panel("GPU memory peak per step (profiled)", "timeseries",
                  (Query(sum_by(_DEVICE, series(m.GPU_MEMORY_PEAK_ALLOCATED), "max"),
                         "rank {{otel_profiler_rank}} GPU {{gpu_device_id}} allocated"),
                   Query(sum_by(_DEVICE, series(m.GPU_MEMORY_PEAK_RESERVED), "max"),
                         "rank {{otel_profiler_rank}} GPU {{gpu_device_id}} reserved")), "bytes",
                  "Peak allocated (tensors) and reserved (caching allocator) GPU memory of the latest "
                  "profiled step: a rising line is memory kept from step to step."),
            gpu_gauge("GPU memory per process", m.GPU_PROCESS_MEMORY, "bytes", "process_pid"),
            gpu_gauge("GPU SM utilization per process", m.GPU_PROCESS_UTILIZATION, "percentunit", "process_pid"),
            gpu_gauge("GPU power", m.GPU_POWER, "watt", hw_type='="gpu"'),
            over_range("GPU energy (range)", m.GPU_ENERGY, "joule", "host_name, hw_id", hw_type='="gpu"'),
            gpu_gauge("GPU temperature", m.GPU_TEMPERATURE, "celsius", hw_type='="gpu"'),
            gpu_gauge("GPU clocks", m.GPU_CLOCK, "hertz", "otel_profiler_gpu_clock"),
            gpu_gauge("GPU memory bandwidth busy", m.GPU_COPY_UTILIZATION, "percentunit"),
            gpu_gauge("PCIe throughput", m.GPU_PCIE, "Bps", "network_io_direction"),
            gpu_gauge("GPU activity: SM, occupancy, tensor, DRAM (Hopper+)", m.GPU_GPM, "percentunit",
                      "otel_profiler_gpu_unit"),
        ]),
        ("Host", [
            gauge("Training process memory (RSS)", m.PROCESS_MEMORY, "bytes", "host_name, instance", "sum"),
            gauge("Machine memory by state", m.SYSTEM_MEMORY, "bytes", "host_name, system_memory_state", "max"),
            gauge("Machine memory in use", m.SYSTEM_MEMORY_UTILIZATION, "percentunit", "host_name", "max"),
            per_second("Network I/O", m.NETWORK_IO, "Bps", "host_name, network_io_direction", op="max"),
            per_second("Disk I/O", m.DISK_IO, "Bps", "host_name, disk_io_direction", op="max"),
        ]),
    ]
