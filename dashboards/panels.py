"""Panel descriptions (:class:`Panel`, :class:`Query`) and their translation into
grafana-foundation-sdk builders, one small function per visualization.

A dashboard module lists ``Panel`` values; :func:`build` turns each into the SDK builder of its
kind with the shared parts (data source, unit, size, queries, trace links) set in one place.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from grafana_foundation_sdk.builders import (bargauge, common, heatmap, piechart, prometheus, stat,
                                             timeseries)
from grafana_foundation_sdk.models.common import (LegendDisplayMode, LegendPlacement, StackingMode)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from otel_profiler.metrics import points as m

from . import links
from .variables import PROMETHEUS

_NAME = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{")
_SUFFIXES = ("_bucket", "_sum", "_count", "")
BY_PROMETHEUS = {spec.prometheus + suffix: spec for spec in m.CATALOGUE
                 for suffix in (_SUFFIXES if spec.kind == m.HISTOGRAM else ("",))}


def metrics_in(expr: str) -> set[m.Spec]:
    """The catalogue metrics an expression reads (every selector is written ``name{...}``)."""
    names = set(_NAME.findall(expr))
    unknown = names - set(BY_PROMETHEUS)
    if unknown:
        raise ValueError(f"not in metric_points: {sorted(unknown)} in {expr}")
    return {BY_PROMETHEUS[n] for n in names}


@dataclass(frozen=True)
class Query:
    """One PromQL target. ``instant``: one value per series (pie, stat, bar gauge);
    ``heatmap``: histogram buckets as a heatmap; ``exemplar``: ask Prometheus for exemplars."""

    expr: str
    legend: str = ""
    instant: bool = False
    heatmap: bool = False
    exemplar: bool = False

    @property
    def metrics(self) -> set[m.Spec]:
        """The catalogue metrics this query reads."""
        return metrics_in(self.expr)


@dataclass(frozen=True)
class Panel:
    """One panel: ``kind`` is timeseries, stat, piechart, heatmap or bargauge."""

    title: str
    kind: str
    queries: tuple[Query, ...]
    unit: str = "short"
    description: str = ""
    width: int = 12
    height: int = 8
    stacked: bool = False
    trace_links: bool = False  # data links from each series (job, rank) to its step traces
    extra: dict = field(default_factory=dict, compare=False)


def _timeseries(p: Panel) -> timeseries.Panel:
    builder = (timeseries.Panel().fill_opacity(10).line_width(1)
               .legend(common.VizLegendOptions().show_legend(True).display_mode(LegendDisplayMode.TABLE)
                       .placement(LegendPlacement.BOTTOM).calcs(["mean", "max", "lastNotNull"])))
    if p.stacked:
        builder = builder.stacking(common.StackingConfig().mode(StackingMode.NORMAL)).fill_opacity(40)
    return builder


def _stat(p: Panel) -> stat.Panel:
    return stat.Panel().reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"]))


def _piechart(p: Panel) -> piechart.Panel:
    return piechart.Panel().reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"]))


def _bargauge(p: Panel) -> bargauge.Panel:
    return bargauge.Panel().reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"]))


def _heatmap(p: Panel) -> heatmap.Panel:
    return (heatmap.Panel().calculate(False).exemplars_color("rgba(255,0,255,0.7)")
            .y_axis(heatmap.YAxisConfig().unit(p.unit))
            .color(heatmap.HeatmapColorOptions().scheme("Oranges").steps(64)))


KINDS = {"timeseries": _timeseries, "stat": _stat, "piechart": _piechart, "bargauge": _bargauge,
         "heatmap": _heatmap}


def query_builder(q: Query, ref: str) -> prometheus.Dataquery:
    """The SDK Prometheus target of ``q`` with refId ``ref``."""
    builder = prometheus.Dataquery().expr(q.expr).legend_format(q.legend or "__auto").ref_id(ref)
    builder = builder.instant() if q.instant else builder.range()
    if q.heatmap:
        builder = builder.format(PromQueryFormat.HEATMAP)
    if q.exemplar:
        builder = builder.exemplar(True)
    return builder


def build(p: Panel, store: str):
    """The SDK builder of ``p``; ``store`` (jaeger or tempo) shapes its trace links."""
    builder = (KINDS[p.kind](p).title(p.title).datasource(PROMETHEUS).unit(p.unit)
               .span(p.width).height(p.height))
    if p.description:
        builder = builder.description(p.description)
    for i, q in enumerate(p.queries):
        builder = builder.with_target(query_builder(q, chr(ord("A") + i)))
    if p.trace_links:
        builder = (builder.data_links([links.series_trace_link(store)])
                   .links([links.trace_link(store, "Search step traces")]))
    return builder
