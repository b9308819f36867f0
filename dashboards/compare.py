"""*Run comparison*: two runs side by side, picked by their run id (``base_run`` and ``new_run``):
step count and time, GPU time by kernel class, GPU busy ratio, launch delay, copies, the GPU memory
peak and the training process's CPU and memory, each over the dashboard's time range.

A run's series are the ones whose (job, instance) carried ``otel_profiler_run_info`` with its run id
during the range: every query is ``expr and on (job, instance) max_over_time(run_info[$__range])``.
Set the time range to cover both runs; two runs served by the same endpoint (job and instance) in
that range cannot be told apart."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard
from grafana_foundation_sdk.models.dashboard import VariableRefresh, VariableSort

from otel_profiler.metrics import points as m

from .panels import Panel, Query
from .promql import RANGE, series, sum_by
from .variables import PROMETHEUS

UID, TITLE = "otel-profiler-compare", "otel-profiler / Run comparison"
DESCRIPTION = "Two runs side by side (base_run, new_run): steps, GPU time, launches, copies, memory, CPU."
RUNS = (("base_run", "base"), ("new_run", "new"))
RUN_LABEL = m.prometheus_label("otel_profiler.run.id")


def run_variable(name: str, label: str) -> dashboard.QueryVariable:
    """One run picked from the run ids the metrics carry."""
    return (dashboard.QueryVariable(name).label(label).datasource(PROMETHEUS)
            .query(f"label_values({m.RUN_INFO.prometheus}, {RUN_LABEL})")
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED).sort(VariableSort.ALPHABETICAL_DESC))


def variables() -> list:
    """This dashboard's own variables (after the shared ones)."""
    return [run_variable("base_run", "Base run"), run_variable("new_run", "New run")]


def of_run(expr: str, var: str) -> str:
    """``expr`` restricted to the series of the run in variable ``var``."""
    info = series(m.RUN_INFO, **{RUN_LABEL: f'=~"${var}"'})
    return f"({expr} and on (job, instance) max_over_time({info}[{RANGE}]))"


def _over(spec: m.Spec, fn: str, suffix: str = "") -> str:
    return f"{fn}({series(spec, suffix)}[{RANGE}])"


def _per_run(title: str, kind: str, unit: str, make, legend: str = "", description: str = "") -> Panel:
    """A panel with one query per run: ``make(var)`` builds the run's expression."""
    return Panel(title, kind, tuple(Query(make(var), f"{name}{legend}", instant=True) for var, name in RUNS),
                 unit, description)


def _quantile(q: float, spec: m.Spec, var: str) -> str:
    return f"histogram_quantile({q}, {sum_by('le', of_run(_over(spec, 'increase', '_bucket'), var))})"


def _ratio(num: str, den: str) -> str:
    return f"{num} / {den}"


def rows() -> list[tuple[str, list[Panel]]]:
    """The dashboard's rows and their panels."""
    step = m.STEP_DURATION
    return [
        ("Steps", [
            _per_run("Steps (range)", "stat", "short",
                     lambda v: sum_by("", of_run(_over(step, "increase", "_count"), v))),
            _per_run("Mean step time", "stat", "s", lambda v: _ratio(
                sum_by("", of_run(_over(step, "increase", "_sum"), v)),
                sum_by("", of_run(_over(step, "increase", "_count"), v)))),
            Panel("Step time p50 and p95", "bargauge",
                  tuple(Query(_quantile(q, step, var), f"{name} p{int(q * 100)}", instant=True)
                        for q in (0.5, 0.95) for var, name in RUNS), "s",
                  "Step time percentiles of each run over the time range."),
        ]),
        ("GPU time", [
            _per_run("GPU time by kernel class", "bargauge", "s",
                     lambda v: sum_by("gpu_kernel_class", of_run(_over(m.KERNEL_TIME, "increase"), v)),
                     " {{gpu_kernel_class}}"),
            _per_run("GPU busy ratio (profiled)", "stat", "percentunit", lambda v: _ratio(
                sum_by("", of_run(_over(m.GPU_BUSY_TIME, "increase"), v)),
                sum_by("", of_run(_over(m.GPU_SPAN_TIME, "increase"), v)))),
            _per_run("Launch delay p50 (HTA)", "stat", "s", lambda v: _quantile(0.5, m.LAUNCH_DELAY, v)),
            _per_run("Memcpy bytes by direction", "bargauge", "bytes",
                     lambda v: sum_by("gpu_memcpy_kind", of_run(_over(m.MEMCPY_BYTES, "increase"), v)),
                     " {{gpu_memcpy_kind}}"),
        ]),
        ("Memory and CPU", [
            _per_run("GPU memory peak (allocated, profiled steps)", "stat", "bytes",
                     lambda v: sum_by("", of_run(_over(m.GPU_MEMORY_PEAK_ALLOCATED, "max_over_time"), v), "max")),
            _per_run("GPU memory peak (reserved, profiled steps)", "stat", "bytes",
                     lambda v: sum_by("", of_run(_over(m.GPU_MEMORY_PEAK_RESERVED, "max_over_time"), v), "max")),
            _per_run("Training process CPU (range average)", "stat", "percentunit",
                     lambda v: sum_by("", of_run(_over(m.PROCESS_CPU_UTILIZATION, "avg_over_time"), v)),
                     description="Each run's processes: share of their cores, user + system, summed over ranks."),
            _per_run("Training process memory (RSS, max)", "stat", "bytes",
                     lambda v: sum_by("", of_run(_over(m.PROCESS_MEMORY, "max_over_time"), v), "max")),
        ]),
    ]
