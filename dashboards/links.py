"""Links from panels to the trace store (Jaeger or Tempo) through Grafana Explore.

A link opens Explore on the dashboard's trace data source (``${traces}``) with a search for
``train.step`` traces, narrowed to a service and a rank when the panel's series carry them
(``${__field.labels.job}``, ``${__field.labels.otel_profiler_rank}``). Jaeger gets its search form
fields (service, operation, tags), Tempo a TraceQL query over the same span attributes
(``otel_profiler.rank`` from ``span_attrs``).
"""

from __future__ import annotations

import json
from urllib.parse import quote

from grafana_foundation_sdk.builders import dashboard
from grafana_foundation_sdk.models.dashboard import DashboardLinkType

from otel_profiler.spans import attributes as span_attrs

STEP_SPAN = "train.step"
RANK_ATTR = "otel_profiler.rank"
assert RANK_ATTR in span_attrs.ATTRIBUTE_NAMES and STEP_SPAN  # names shared with the span model
TRACE_VAR = "traces"
STORES = ("jaeger", "tempo")


def _query(store: str, service: str, rank: str) -> dict:
    if store == "jaeger":
        query = {"refId": "A", "queryType": "search", "operation": STEP_SPAN, "limit": 20}
        if service:
            query["service"] = service
        if rank:
            query["tags"] = f"{RANK_ATTR}={rank}"
        return query
    conditions = [f'name = "{STEP_SPAN}"']
    if service:
        conditions.append(f'resource.service.name = "{service}"')
    if rank:
        conditions.append(f"span.{RANK_ATTR} = {rank}")
    return {"refId": "A", "queryType": "traceql", "limit": 20, "query": "{ " + " && ".join(conditions) + " }"}


def explore_url(store: str, service: str = "", rank: str = "") -> str:
    """Grafana Explore URL searching ``train.step`` traces in the ``${traces}`` data source."""
    if store not in STORES:
        raise ValueError(f"trace store must be one of {STORES}, not {store!r}")
    pane = {"datasource": f"${{{TRACE_VAR}}}", "queries": [_query(store, service, rank)],
            "range": {"from": "${__from}", "to": "${__to}"}}
    panes = json.dumps({"steps": pane}, sort_keys=True, separators=(",", ":"))
    # Keep Grafana's ${...} placeholders readable; encode the rest.
    return "/explore?schemaVersion=1&orgId=1&panes=" + quote(panes, safe="${}:,_.")


def trace_link(store: str, title: str, service: str = "", rank: str = "") -> dashboard.DashboardLink:
    """A panel link (or series data link) to a trace search."""
    return (dashboard.DashboardLink(title).type(DashboardLinkType.LINK)
            .url(explore_url(store, service, rank)).target_blank(True))


def series_trace_link(store: str) -> dashboard.DashboardLink:
    """Data link on a per-rank series: that service's and rank's step traces."""
    job, rank = "${__field.labels.job}", "${__field.labels.otel_profiler_rank}"
    return trace_link(store, f"Step traces of this rank ({job}, rank {rank})", job, rank)


def dashboard_links(store: str) -> list[dashboard.DashboardLink]:
    """Top-of-dashboard links: the other otel-profiler dashboards and a trace search."""
    return [dashboard.DashboardLink("otel-profiler").type(DashboardLinkType.DASHBOARDS).tags(["otel-profiler"])
            .as_dropdown(False).include_vars(True).keep_time(True),
            trace_link(store, "Search step traces")]
