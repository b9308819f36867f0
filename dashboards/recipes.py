"""Panel recipes shared by the dashboards: one function per repeated panel shape, so similar panels
(a GPU gauge per node and GPU, percentiles of a histogram, a rate per label) are generated, never
copied."""

from __future__ import annotations

from otel_profiler.metrics import points as m

from .panels import Panel, Query
from .promql import RANGE, RATE, mean, quantile, rate, series, sum_by

GPU_BY = "host_name, hw_id"
GPU_LEGEND = "{{host_name}} {{hw_id}}"


def _legend(by: str) -> str:
    return " ".join("{{" + label.strip() + "}}" for label in by.split(",") if label.strip())


def gauge(title: str, spec: m.Spec, unit: str, by: str, op: str = "avg", description: str = "",
          **match: str) -> Panel:
    """A gauge metric over time, aggregated ``op by (by)``."""
    return Panel(title, "timeseries", (Query(sum_by(by, series(spec, **match), op), _legend(by)),),
                 unit, description or spec.doc)


def gpu_gauge(title: str, spec: m.Spec, unit: str, extra: str = "", **match: str) -> Panel:
    """A GPU (NVML) gauge per node and GPU, plus ``extra`` labels."""
    return gauge(title, spec, unit, ", ".join(filter(None, [GPU_BY, extra])), **match)


def per_second(title: str, spec: m.Spec, unit: str, by: str, stacked: bool = False, op: str = "sum",
               **match: str) -> Panel:
    """A counter's rate per ``by`` labels (``op="max"`` for machine-wide counters every rank reports)."""
    return Panel(title, "timeseries", (Query(sum_by(by, rate(spec, **match), op), _legend(by)),), unit,
                 spec.doc, stacked=stacked)


def over_range(title: str, spec: m.Spec, unit: str, by: str, kind: str = "stat", **match: str) -> Panel:
    """A counter's increase over the dashboard's time range (one value per ``by`` group)."""
    expr = sum_by(by, rate(spec, RANGE, "increase", **match))
    return Panel(title, kind, (Query(expr, _legend(by), instant=True),), unit, spec.doc, width=6)


def range_average(title: str, spec: m.Spec, by: str, kind: str = "stat") -> Panel:
    """A ratio gauge averaged over the dashboard's time range (one value per ``by`` group)."""
    expr = sum_by(by, f"avg_over_time({series(spec)}[{RANGE}])", "avg")
    return Panel(title, kind, (Query(expr, _legend(by), instant=True),), "percentunit", spec.doc, width=6)


def percentiles(title: str, spec: m.Spec, qs: tuple[float, ...] = (0.5, 0.9, 0.99), by: str = "otel_profiler_rank",
                exemplar: bool = False, trace_links: bool = False) -> Panel:
    """Percentiles of a histogram metric per ``by`` labels."""
    queries = tuple(Query(quantile(q, spec, by), f"p{round(q * 100)} {_legend(by)}", exemplar=exemplar)
                    for q in qs)
    return Panel(title, "timeseries", queries, "s", spec.doc, trace_links=trace_links)


def histogram_heatmap(title: str, spec: m.Spec) -> Panel:
    """A histogram metric's buckets over time as a heatmap, with exemplars (→ traces)."""
    expr = sum_by("le", f"increase({series(spec, '_bucket')}[{RATE}])")
    return Panel(title, "heatmap", (Query(expr, "{{le}}", heatmap=True, exemplar=True),), "s",
                 spec.doc + " Exemplars (dots) open the step's trace.", trace_links=True)


def histogram_bars(title: str, spec: m.Spec) -> Panel:
    """A histogram metric's bucket counts over the dashboard's range, one bar per bucket."""
    expr = sum_by("le", f"increase({series(spec, '_bucket')}[{RANGE}])")
    return Panel(title, "bargauge", (Query(expr, "{{le}}", instant=True, heatmap=True),), "short",
                 spec.doc + " Steps per bucket (upper bound) over the time range.", width=6)


def mean_per_rank(title: str, spec: m.Spec, by: str = "job, otel_profiler_rank") -> Panel:
    """Mean of a histogram metric per rank over time, with links to each rank's traces."""
    return Panel(title, "timeseries", (Query(mean(spec, by), "mean " + _legend(by), exemplar=True),), "s",
                 spec.doc, trace_links=True)
