"""One summary document for every caller: ``otel-profiler run``'s printed table and ``summary.json``
carry the insights that ``summary FOLDER`` shows, and every renderer reads the same document."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import trace
from cuda_tracer.loading import load_profile
from cuda_tracer.profile import write_rank
from otel_profiler.analysis.document import SummaryDocument
from otel_profiler.analysis.insights import Thresholds
from otel_profiler.commands.run import _report
from otel_profiler.live.output import write_summary
from otel_profiler.report.renderers import RENDERERS, RenderOptions

REPO = Path(__file__).resolve().parents[2]
ALEXNET = "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """A profile folder holding a real trace's rank, as a live run leaves it."""
    out = tmp_path_factory.mktemp("prof")
    for rank in load_profile([str(trace(ALEXNET))]).ranks:
        write_rank(str(out), rank, part=0)
    return out


def test_run_summary_json_and_table_carry_the_insights_of_summary_folder(folder, capsys):
    written = write_summary(str(folder))
    stored = json.loads((folder / "summary.json").read_text())
    cli = subprocess.run([sys.executable, "-m", "otel_profiler", "summary", str(folder), "--format", "json"],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0, cli.stderr
    shown = json.loads(cli.stdout)
    assert shown["insights"], "the trace should give findings"
    assert stored["insights"] == shown["insights"] == written["insights"]
    _report(str(folder), top=5)  # what `otel-profiler run` prints after the job
    printed = capsys.readouterr().err
    assert f"== Insights ({len(shown['insights'])})" in printed
    assert all(i["title"][:40] in printed for i in shown["insights"])


def test_every_renderer_reads_the_same_document(folder):
    doc = SummaryDocument(load_profile([str(folder)]), Thresholds(gpu_util_low_pct=99.0))
    outputs = {name: renderer.render(doc, RenderOptions(top=3)) for name, renderer in RENDERERS.items()}
    assert set(outputs) == {"table", "csv", "json", "html", "perfetto"}
    assert all(isinstance(outputs[name], bytes) == r.binary for name, r in RENDERERS.items())  # as declared
    assert {name: r.extension for name, r in RENDERERS.items()} == {
        "table": ".txt", "csv": ".csv", "json": ".json", "html": ".html", "perfetto": ".json"}
    assert isinstance(outputs["perfetto"], bytes) and json.loads(outputs["perfetto"])["traceEvents"]
    assert json.loads(outputs["json"]) == doc.summary  # one summary, computed once
    low = [i for i in doc.summary["insights"] if i["rule"] == "low_gpu_utilization"]
    assert low and low[0]["title"][:40] in outputs["table"]  # the document's thresholds apply
    assert '"gpu_util_low_pct"' in outputs["html"] and '"value":99.0' in outputs["html"]
    assert low[0]["evidence"] in outputs["csv"] and low[0]["title"] in outputs["html"]
