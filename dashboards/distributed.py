"""*Distributed*: per-rank step time, stragglers (the slowest rank and how far it trails the median
rank) and load balance across ranks and GPUs."""

from __future__ import annotations

from otel_profiler.metrics import points as m

from .panels import Panel, Query
from .promql import RANGE, mean, rate, series, sum_by
from .recipes import gauge, mean_per_rank, percentiles, range_average

UID, TITLE = "otel-profiler-distributed", "otel-profiler / Distributed"
DESCRIPTION = "Per-rank step time, stragglers and load balance across ranks and GPUs."

RANK_BY = "job, otel_profiler_rank"


def _stragglers() -> Panel:
    per_rank = mean(m.STEP_DURATION, RANK_BY)
    return Panel("Stragglers: slowest rank", "timeseries",
                 (Query(f"topk(1, {per_rank})", "slowest: {{job}} rank {{otel_profiler_rank}}", exemplar=True),
                  Query(f"quantile(0.5, {per_rank})", "median rank")), "s",
                 "Mean step time of the slowest rank against the median over ranks, per rate window.",
                 trace_links=True)


def _straggler_factor() -> Panel:
    per_rank = mean(m.STEP_DURATION, RANK_BY)
    return Panel("Straggler factor (slowest / median rank)", "timeseries",
                 (Query(f"max({per_rank}) / quantile(0.5, {per_rank})", "slowest / median"),), "none",
                 "1.0 = balanced; the insight rule straggler_ranks fires at 1.05.")


def _gpu_balance() -> Panel:
    by = "otel_profiler_rank, gpu_device_id"
    ratio = f"{sum_by(by, rate(m.GPU_BUSY_TIME, RANGE))} / {sum_by(by, rate(m.GPU_SPAN_TIME, RANGE))}"
    return Panel("Load balance: GPU busy per rank and device (profiled)", "bargauge",
                 (Query(ratio, "rank {{otel_profiler_rank}} GPU {{gpu_device_id}} (range)", instant=True),
                  Query(sum_by(by, series(m.GPU_BUSY), "max"),
                        "rank {{otel_profiler_rank}} GPU {{gpu_device_id}} (latest)", instant=True)), "percentunit",
                 "Merged GPU-op time / device span; the insight rule load_balancing fires at 20 points apart.")


def _utilization_spread() -> Panel:
    per_gpu = sum_by("host_name, hw_id", series(m.GPU_UTILIZATION), "avg")
    return Panel("GPU utilization spread (max - min over GPUs)", "timeseries",
                 (Query(f"max({per_gpu}) - min({per_gpu})", "spread"),), "percentunit",
                 "0 = every GPU equally busy (NVML).")


def rows() -> list[tuple[str, list[Panel]]]:
    """The dashboard's rows and their panels."""
    return [
        ("Step time per rank", [
            mean_per_rank("Step time per rank (mean)", m.STEP_DURATION),
            percentiles("Step time per rank (p95)", m.STEP_DURATION, (0.95,), RANK_BY, trace_links=True),
            _stragglers(),
            _straggler_factor(),
        ]),
        ("Load balance", [
            _gpu_balance(),
            range_average("Load balance: GPU utilization per GPU (range)", m.GPU_UTILIZATION, "host_name, hw_id",
                          kind="bargauge"),
            _utilization_spread(),
            Panel("Compute time per rank", "timeseries",
                  (Query(sum_by("otel_profiler_rank", rate(m.KERNEL_TIME, gpu_kernel_class='="compute"')),
                         "rank {{otel_profiler_rank}}"),), "s",
                  "Compute-kernel seconds per second per rank (profiled windows)."),
            gauge("Training process CPU per rank", m.PROCESS_CPU_UTILIZATION, "percentunit",
                  "host_name, instance", "sum"),
        ]),
    ]
