"""Every PromQL expression of every committed dashboard, run through a real Prometheus that scraped a
profiled CPU training job (``tests/metrics_job.py``, scraped with the static job of
``otel_profiler/stack/prometheus.yml``).

Each expression is run twice, with the template variables at All (``.*``) and at the concrete values
the scrape config gives (user, team, host, job, rank 0): it must parse, queries expected to have data
on a CPU-only run (``dashboards.coverage``) must return series, and GPU-only queries must return
none (so the GPU-only list cannot hide a broken CPU panel). Variable queries and the step-time
exemplars are checked the same way.
"""

from __future__ import annotations

import json
import re
import sys
import time
import urllib.error
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # dashboards/ is a folder of the repository, not an installed package

from dashboards import coverage, generate
from dashboards.panels import metrics_in
from metrics_job import running, wait_for
from prometheus_server import available, free_port, prometheus_server

pytestmark = pytest.mark.skipif(not available(), reason="/usr/bin/prometheus missing (apt-get install prometheus)")

BUILTINS = {"$__rate_interval": "1m", "$__range": "5m", "$__interval": "15s"}
ALL = {name: ".*" for name in ("team", "user", "job", "host", "rank", "gpu", "base_run", "new_run")}


def substitute(expr: str, values: dict[str, str]) -> str:
    """``expr`` with Grafana's built-in and the dashboards' template variables replaced."""
    for name, value in BUILTINS.items():
        expr = expr.replace(name, value)
    return re.sub(r"\$(\w+)", lambda mo: values[mo.group(1)], expr)


def dashboard_queries() -> list[tuple[str, str, dict]]:
    """(dashboard file, panel title, target) for every target of the committed JSON."""
    out = []
    for path in sorted((REPO / "otel_profiler" / "stack" / "grafana").glob("*.json")):
        for panel in json.loads(path.read_text())["panels"]:
            for target in panel.get("targets", []):
                out.append((path.name, panel["title"], target))
    return out


def static_job(port: int) -> dict:
    """The shipped static scrape job, pointed at the test job's port (scraped every second)."""
    config = yaml.safe_load((REPO / "otel_profiler" / "stack" / "prometheus.yml").read_text())
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "otel-profiler"]
    job = {**job, "scrape_interval": "1s", "scrape_timeout": "900ms"}
    job["static_configs"] = [{**job["static_configs"][0], "targets": [f"127.0.0.1:{port}"]}]
    return job


@pytest.fixture(scope="module")
def scraped(tmp_path_factory):
    """(Prometheus, concrete variable values) once the job's steps are all scraped."""
    out = tmp_path_factory.mktemp("job")
    port = free_port()
    job = static_job(port)
    labels = job["static_configs"][0]["labels"]
    concrete = {"team": labels["ml_team"], "user": labels["enduser_id"], "host": labels["host_name"],
                "job": job["job_name"], "rank": "0", "gpu": ".*", "base_run": "dashboards-it",
                "new_run": "dashboards-it"}
    with prometheus_server([job]) as prom, running(out, port, 3, "dashboards-it", gate=True) as proc:
        train_scraped(prom, [(out, port, proc)])
        yield prom, concrete


def poll(condition, timeout: float, what: str) -> None:
    """Wait until ``condition()`` holds, checking every 0.2 s; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for the {what}"
        time.sleep(0.2)


def train_scraped(prom, jobs: list) -> None:
    """Let gated ``metrics_job`` runs ``[(out, port, process)]`` train once Prometheus has scraped
    their step counters at zero, and return once it holds each job's last step and at least three
    scrapes at that count (``rate()`` and ``increase()`` need two samples): a busy machine can
    delay a job, a scrape, or both."""
    count = 'otel_profiler_step_duration_seconds_count{instance="127.0.0.1:%d"}'
    poll(lambda: all(prom.query(count % port) for _, port, _ in jobs), 120, "first scrape of each job")
    for out, _, _ in jobs:
        (out / "go").touch()
    for out, port, proc in jobs:
        wait_for(out / "done", proc, 120)
        trained = int((out / "done").read_text())
        poll(lambda: _scrapes_at(prom, count % port, trained) >= 3, 120,
             f"three scrapes of the last step of {out.name}")


def _scrapes_at(prom, selector: str, value: int) -> int:
    """How many of the last minute's samples of ``selector`` equal ``value``."""
    result = prom.api("/api/v1/query", query=f"{selector}[1m]")["result"]
    return sum(float(v) == value for _, v in result[0]["values"]) if result else 0


def _run(prom, expr: str) -> list:
    try:
        return prom.query(expr)
    except urllib.error.HTTPError as exc:  # 400 = parse or evaluation error
        raise AssertionError(f"Prometheus refused {expr}: {exc.read().decode()}") from None


def test_every_dashboard_query_parses_and_has_the_expected_data(scraped):
    prom, concrete = scraped
    queries = dashboard_queries()
    assert len(queries) > 40
    seen = {"data": 0, "gpu": 0, "event": 0}
    failures = []
    for values in (ALL, concrete):
        for board, title, target in queries:
            expr = substitute(target["expr"], values)
            expected = coverage.expectation(metrics_in(target["expr"]))
            seen[expected] += 1
            result = _run(prom, expr)
            if expected == "data" and not result:
                failures.append(f"{board} / {title}: no series for {expr}")
            if expected == "gpu" and result:
                failures.append(f"{board} / {title}: GPU-only query has data on a CPU run: {expr}")
    assert not failures, "\n".join(failures)
    assert seen["data"] >= 20 and seen["gpu"] >= 20 and seen["event"] >= 2


def test_variable_queries_find_the_scraped_values(scraped):
    prom, concrete = scraped
    board = json.loads((REPO / "otel_profiler" / "stack" / "grafana" / "otel-profiler-overview.json").read_text())
    variables = {v["name"]: v for v in board["templating"]["list"]}
    for name in (n for n in ALL if not n.endswith("_run")):
        mo = re.fullmatch(r"label_values\((.+), (\w+)\)", variables[name]["query"])
        assert mo, variables[name]["query"]
        selector, label = substitute(mo.group(1), ALL), mo.group(2)
        values = {s.get(label) for s in prom.api("/api/v1/series", **{"match[]": selector})}
        if name == "gpu":
            assert values == set(), "no GPU here, so no GPU values"
        else:
            assert values == {concrete[name]}, (name, selector, values)


def test_step_time_exemplars_reach_the_heatmap(scraped):
    prom, _ = scraped
    targets = [t for _, _, t in dashboard_queries() if t.get("exemplar") and t.get("format") == "heatmap"]
    assert targets
    now = time.time()
    for target in targets:
        found = prom.query_exemplars(substitute(target["expr"], ALL), now - 300, now + 5)
        ids = {e["labels"]["trace_id"] for s in found for e in s["exemplars"]}
        assert ids and all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)


def test_gpu_only_panels_are_named_and_really_gpu_only():
    gpu_only = generate.gpu_only_panels()
    assert "GPU utilization per node and GPU" in gpu_only and "Launch delay percentiles (HTA)" in gpu_only
    for panel in ("Step time", "CPU utilization per node and training process", "Events captured per second by kind"):
        assert panel not in gpu_only


def test_the_comparison_dashboard_tells_two_runs_apart(tmp_path):
    """Two jobs with their own run ids scraped by one Prometheus: each comparison query of a run
    equals the same expression over that run's endpoint alone, and the run variable lists both."""
    ports = free_port(), free_port()
    job = static_job(ports[0])
    job["static_configs"] = [{**job["static_configs"][0], "targets": [f"127.0.0.1:{p}" for p in ports]}]
    board = json.loads((REPO / "otel_profiler" / "stack" / "grafana" / "otel-profiler-compare.json").read_text())
    panels = {p["title"]: p for p in board["panels"] if p["type"] != "row"}
    values = dict(ALL, base_run="run-a", new_run="run-b")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with prometheus_server([job]) as prom, \
            running(tmp_path / "a", ports[0], 2, "run-a", gate=True) as a, \
            running(tmp_path / "b", ports[1], 4, "run-b", gate=True) as b:
        train_scraped(prom, [(tmp_path / "a", ports[0], a), (tmp_path / "b", ports[1], b)])
        (run_var,) = [v for v in board["templating"]["list"] if v["name"] == "base_run"]
        mo = re.fullmatch(r"label_values\((.+), (\w+)\)", run_var["query"])
        found = {s.get(mo.group(2)) for s in prom.api("/api/v1/series", **{"match[]": mo.group(1)})}
        assert found == {"run-a", "run-b"}
        at = time.time()  # one evaluation time for every query compared

        def value(expr: str) -> float:
            (series,) = prom.api("/api/v1/query", query=expr, time=at)["result"]
            return float(series["value"][1])

        for title in ("Steps (range)", "Training process memory (RSS, max)"):
            for target, port in zip(panels[title]["targets"], ports):
                expr = substitute(target["expr"], values)
                alone = re.sub(r" and on \(job, instance\) max_over_time\(otel_profiler_run_info\{[^}]*\}\[5m\]\)", "",
                               expr).replace('job=~".*"', f'job=~".*", instance="127.0.0.1:{port}"')
                assert alone != expr
                assert value(expr) == pytest.approx(value(alone), rel=1e-12), title
        steps = [value(substitute(t["expr"], values)) for t in panels["Steps (range)"]["targets"]]
        assert steps[1] > steps[0] > 0  # run-b trained twice as long
