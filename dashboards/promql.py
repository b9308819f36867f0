"""PromQL building blocks: metric selectors with the dashboards' template-variable filters.

Every metric a dashboard reads goes through :func:`series`, which takes a ``metric_points.Spec`` (the
single source of metric names) and adds the filters that apply to it: the target filters
(team, user, job, host) always, ``rank`` when the metric carries ``otel_profiler.rank`` and ``gpu``
when it carries ``hw.id``. Variables are multi-value with the All value ``.*``, and ``label=~".*"``
also matches series without that label, so a filter never hides a series that lacks its label
(system metrics have no rank; a direct scrape may have no user/team labels).
"""

from __future__ import annotations

from otel_profiler.metrics import points as m

# Template variable → Prometheus label. Target labels come from the scrape config (prometheus.yml
# relabeling) or from the Collector's resource_to_telemetry_conversion (resource attributes
# enduser.id, ml.team, host.name; job = service.name).
TARGET_FILTERS = {"team": "ml_team", "user": "enduser_id", "job": "job", "host": "host_name"}
RANK_LABEL = m.prometheus_label("otel_profiler.rank")
GPU_LABEL = m.prometheus_label("hw.id")

RATE = "$__rate_interval"
RANGE = "$__range"


def filters(spec: m.Spec) -> dict[str, str]:
    """label → variable for every filter that applies to ``spec``."""
    out = {label: var for var, label in TARGET_FILTERS.items()}
    if "otel_profiler.rank" in spec.labels:
        out[RANK_LABEL] = "rank"
    if "hw.id" in spec.labels:
        out[GPU_LABEL] = "gpu"
    return out


def series(spec: m.Spec, suffix: str = "", **match: str) -> str:
    """``name{filters, extra matchers}``; ``match`` values are PromQL matchers such as ``'="gpu"'``
    or ``'=~"idle|iowait"'`` keyed by Prometheus label."""
    parts = [f'{label}=~"${var}"' for label, var in filters(spec).items()]
    parts += [f"{label}{matcher}" for label, matcher in sorted(match.items())]
    return f"{spec.prometheus}{suffix}{{{', '.join(parts)}}}"


def rate(spec: m.Spec, window: str = RATE, fn: str = "rate", **match: str) -> str:
    """``fn(series[window])``: rate, increase or another range function of a counter."""
    return f"{fn}({series(spec, **match)}[{window}])"


def sum_by(labels: str, expr: str, op: str = "sum") -> str:
    """``op by (labels) (expr)``, or ``op(expr)`` without labels."""
    return f"{op} by ({labels}) ({expr})" if labels else f"{op}({expr})"


def quantile(q: float, spec: m.Spec, by: str, window: str = RATE) -> str:
    """``histogram_quantile`` of a histogram metric, per ``by`` labels."""
    inner = f"rate({series(spec, '_bucket')}[{window}])"
    return f"histogram_quantile({q}, {sum_by(', '.join(filter(None, ['le', by])), inner)})"


def mean(spec: m.Spec, by: str, window: str = RATE) -> str:
    """Mean of a histogram metric over ``window``: rate(sum) / rate(count), per ``by`` labels."""
    total = sum_by(by, f"rate({series(spec, '_sum')}[{window}])")
    count = sum_by(by, f"rate({series(spec, '_count')}[{window}])")
    return f"{total} / {count}"
