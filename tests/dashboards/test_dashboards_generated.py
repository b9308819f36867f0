"""The committed dashboards: regenerating gives byte-identical JSON; every metric name they use is in
``otel_profiler.metrics.points`` and docs/metrics.md, and every catalogue metric is on a dashboard or marked not shown;
variables, data sources and trace links are as documented."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # dashboards/ is a folder of the repository, not an installed package

from dashboards import coverage, generate
from dashboards.links import explore_url
from dashboards.panels import metrics_in
from otel_profiler.metrics import points as m

GRAFANA = REPO / "otel_profiler" / "stack" / "grafana"
FILTERS = {"team", "user", "job", "host", "rank", "gpu"}


def boards() -> dict[str, dict]:
    """Committed dashboard JSON by file name."""
    return {p.name: json.loads(p.read_text()) for p in sorted(GRAFANA.glob("*.json"))}


def test_regenerating_gives_the_committed_json_byte_for_byte():
    expected = generate.outputs()
    assert {p.name for p in expected} == set(boards())
    for path, text in expected.items():
        assert path.read_text() == text, f"{path.name} is stale: run python -m dashboards.generate"
    assert generate.main(["--check"]) == 0


def test_check_reports_a_stale_file(tmp_path):
    generate.main(["--out", str(tmp_path)])
    assert generate.main(["--check", "--out", str(tmp_path)]) == 0
    (tmp_path / "otel-profiler-health.json").write_text("{}\n")
    assert generate.main(["--check", "--out", str(tmp_path)]) == 1


def test_the_four_dashboards_and_their_variables():
    titles = {b["title"] for b in boards().values()}
    assert titles == {"otel-profiler / Training overview", "otel-profiler / Distributed",
                      "otel-profiler / Profiler health", "otel-profiler / Run comparison"}
    for board in boards().values():
        variables = {v["name"]: v for v in board["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
        assert variables["traces"]["type"] == "datasource" and variables["traces"]["query"] == "jaeger"
        for name in FILTERS:
            v = variables[name]
            assert v["type"] == "query" and v["multi"] and v["includeAll"] and v["allValue"] == ".*"
        for panel in board["panels"]:
            if panel["type"] != "row":
                assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]


def test_every_query_filters_by_the_variables_that_apply():
    for board in boards().values():
        for panel in board["panels"]:
            for target in panel.get("targets", []):
                for selector in re.findall(r"(\w+)\{([^}]*)\}", target["expr"]):
                    used = set(re.findall(r'=~"\$(\w+)"', selector[1]))
                    assert {"team", "user", "job", "host"} <= used, (panel["title"], selector)


def test_metric_names_match_the_catalogue_and_the_docs():
    readme = (REPO / "docs" / "metrics.md").read_text()
    listed = set(re.findall(r"\| `[^`]+` \| `[^`]*` \| \w+ \| .*? \| `(\w+)` \|", readme))
    assert listed == {s.prometheus for s in m.CATALOGUE}, "docs/metrics.md table differs from metric_points"
    used: set[m.Spec] = set()
    for board in boards().values():
        for panel in board["panels"]:
            for target in panel.get("targets", []):
                used |= metrics_in(target["expr"])  # raises on a name not in the catalogue
    shown_and_hidden = used & set(coverage.NOT_SHOWN)
    assert not shown_and_hidden
    missing = set(m.CATALOGUE) - used - set(coverage.NOT_SHOWN)
    assert not missing, f"on no dashboard and not marked NOT_SHOWN: {sorted(s.name for s in missing)}"


def test_unknown_metric_names_are_refused():
    with pytest.raises(ValueError, match="not in metric_points"):
        metrics_in('rate(otel_profiler_made_up_total{job=~"$job"}[1m])')


def test_step_panels_have_exemplars_and_trace_links():
    overview = boards()["otel-profiler-overview.json"]
    heat = next(p for p in overview["panels"] if p["type"] == "heatmap")
    assert heat["targets"][0]["exemplar"] and heat["targets"][0]["format"] == "heatmap"
    linked = [p for b in boards().values() for p in b["panels"]
              if p.get("fieldConfig", {}).get("defaults", {}).get("links")]
    assert {"Step time", "Step time per rank (mean)", "Stragglers: slowest rank"} <= {p["title"] for p in linked}
    for panel in linked:
        (link,) = panel["fieldConfig"]["defaults"]["links"]
        assert "${__field.labels.otel_profiler_rank}" in link["url"] and link["targetBlank"]
    for board in boards().values():
        assert any(link["type"] == "link" and "train.step" in link["url"] for link in board["links"])


def _pane(url: str) -> dict:
    panes = parse_qs(urlsplit(url).query)["panes"][0]
    return json.loads(panes)["steps"]


@pytest.mark.parametrize("store", ["jaeger", "tempo"])
def test_trace_search_urls_are_explore_panes_for_either_store(store):
    pane = _pane(explore_url(store, "trainer", "3"))
    assert pane["datasource"] == "${traces}"
    (query,) = pane["queries"]
    if store == "jaeger":
        assert (query["queryType"], query["service"], query["operation"], query["tags"]) == \
            ("search", "trainer", "train.step", "otel_profiler.rank=3")
    else:
        assert query["queryType"] == "traceql"
        assert query["query"] == ('{ name = "train.step" && resource.service.name = "trainer" '
                                  '&& span.otel_profiler.rank = 3 }')
    with pytest.raises(ValueError):
        explore_url("zipkin")


def test_tempo_flavour_builds(tmp_path):
    assert generate.main(["--trace-store", "tempo", "--out", str(tmp_path)]) == 0
    board = json.loads((tmp_path / "otel-profiler-overview.json").read_text())
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["traces"]["query"] == "tempo"
    assert "traceql" in json.dumps(board["links"])


def test_the_comparison_dashboard_picks_two_runs_in_every_query():
    board = boards()["otel-profiler-compare.json"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    for name in ("base_run", "new_run"):
        v = variables[name]
        assert v["type"] == "query" and not v.get("multi") and not v.get("includeAll")
        assert v["query"] == "label_values(otel_profiler_run_info, otel_profiler_run_id)"
    panels = [p for p in board["panels"] if p["type"] != "row"]
    assert len(panels) >= 10
    for panel in panels:
        runs = [re.findall(r'otel_profiler_run_id=~"\$(\w+)"', t["expr"]) for t in panel["targets"]]
        assert all(len(r) == t["expr"].count("otel_profiler_run_info{") >= 1 for r, t in zip(runs, panel["targets"]))
        assert {r for rs in runs for r in rs} == {"base_run", "new_run"}, panel["title"]
        assert all(t.get("instant") for t in panel["targets"]), panel["title"]
