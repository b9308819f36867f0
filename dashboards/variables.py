"""Template variables: data sources (Prometheus and the trace store) and the filters
team, user, job/service, host, rank and GPU (``promql.TARGET_FILTERS`` and friends).

Filter variables are multi-value with All = ``.*`` (so ``label=~"$var"`` also keeps series without
the label) and list the values found on a metric every profiled process exports
(``process.memory.usage``), or on the metric that carries the label (rank, GPU).
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard
from grafana_foundation_sdk.models.dashboard import (DataSourceRef, VariableOption, VariableRefresh,
                                                     VariableSort)

from otel_profiler.metrics import points as m

from . import promql
from .links import TRACE_VAR

PROMETHEUS_VAR = "datasource"
PROMETHEUS = DataSourceRef(type_val="prometheus", uid=f"${{{PROMETHEUS_VAR}}}")
# Default data source uids, as provisioning/datasources/datasources.yaml names them.
DEFAULT_UIDS = {"prometheus": "prometheus", "jaeger": "jaeger", "tempo": "tempo"}

# variable → (label, metric the values are read from, label text)
FILTER_SOURCES = {
    "team": (promql.TARGET_FILTERS["team"], m.PROCESS_MEMORY, "Team"),
    "user": (promql.TARGET_FILTERS["user"], m.PROCESS_MEMORY, "User"),
    "job": (promql.TARGET_FILTERS["job"], m.PROCESS_MEMORY, "Job / service"),
    "host": (promql.TARGET_FILTERS["host"], m.PROCESS_MEMORY, "Host"),
    "rank": (promql.RANK_LABEL, m.EVENTS, "Rank"),
    "gpu": (promql.GPU_LABEL, m.GPU_UTILIZATION, "GPU"),
}


def datasource_variable(name: str, plugin: str, label: str) -> dashboard.DatasourceVariable:
    """A data-source picker of one plugin type, defaulting to the provisioned uid."""
    uid = DEFAULT_UIDS[plugin]
    return (dashboard.DatasourceVariable(name).label(label).type(plugin)
            .current(VariableOption(selected=True, text=uid, value=uid)))


def label_values_query(name: str) -> str:
    """``label_values(metric{filters of the variables before this one}, label)``."""
    label, spec, _ = FILTER_SOURCES[name]
    earlier = list(FILTER_SOURCES)[:list(FILTER_SOURCES).index(name)]
    applicable = promql.filters(spec)
    matchers = [f'{lab}=~"${var}"' for lab, var in applicable.items() if var in earlier]
    selector = f"{spec.prometheus}{{{', '.join(matchers)}}}" if matchers else spec.prometheus
    return f"label_values({selector}, {label})"


def filter_variable(name: str) -> dashboard.QueryVariable:
    """A multi-value label filter with All = ``.*``."""
    _, _, text = FILTER_SOURCES[name]
    return (dashboard.QueryVariable(name).label(text).datasource(PROMETHEUS)
            .query(label_values_query(name)).multi(True).include_all(True).all_value(".*")
            .current(VariableOption(selected=True, text="All", value="$__all"))
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED).sort(VariableSort.ALPHABETICAL_ASC))


def all_variables(store: str) -> list:
    """Every variable of every dashboard, in display order."""
    return ([datasource_variable(PROMETHEUS_VAR, "prometheus", "Prometheus"),
             datasource_variable(TRACE_VAR, store, "Traces")]
            + [filter_variable(name) for name in FILTER_SOURCES])
