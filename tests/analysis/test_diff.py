"""``otel-profiler diff`` on real traces: a run against itself changes nothing; against another run
every delta is the difference of the two summaries."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cuda_tracer.loading import load_profile
from otel_profiler.analysis.diff import diff
from otel_profiler.analysis.summary import summarize

from conftest import trace

BASE = "hta/trace_filter/sampled_rank-0.json.gz"
NEW = "hta/trace_filter/sampled_rank-1.json.gz"
MEMORY = "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
OTHER_MEMORY = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"


def _summary(relative: str) -> dict:
    return summarize(load_profile([str(trace(relative))]))


def _figures(node, path=""):
    """Every figure of a diff, with its path."""
    if isinstance(node, dict) and set(node) == {"base", "new", "delta", "pct"}:
        yield path, node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from _figures(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _figures(v, f"{path}[{i}]")


@pytest.mark.parametrize("relative", [BASE, MEMORY])
def test_a_run_against_itself_changes_nothing(relative):
    s = _summary(relative)
    d = diff(s, s)
    figures = list(_figures(d))
    assert len(figures) > 50
    assert all(f["delta"] == 0 for _, f in figures), [p for p, f in figures if f["delta"]]
    assert {r["status"] for r in d["kernels"]["by_name"] + d["operators"] + d["modules"]} == {"same"}
    assert len(d["kernels"]["by_name"]) == len(s["kernels"]["by_name"])
    assert len(d["modules"]) == len((s["operators"]["modules"] or {}).get("by_type", []))


@pytest.mark.parametrize("base, new", [(BASE, NEW), (MEMORY, OTHER_MEMORY)])
def test_deltas_are_the_difference_of_the_summaries(base, new):
    b, n = _summary(base), _summary(new)
    d = diff(b, n)
    assert d["kernels"]["total_us"]["delta"] == pytest.approx(n["kernels"]["total_us"] - b["kernels"]["total_us"])
    for c in ("compute", "communication", "memory"):
        assert d["kernel_classes"][c]["delta"] == pytest.approx(n["kernels"]["by_class"][c] - b["kernels"]["by_class"][c])
    (key, dev), = d["devices"].items()
    (bdev,), (ndev,) = b["devices"].values(), n["devices"].values()
    assert dev["busy_us"]["delta"] == pytest.approx(ndev["busy_us"] - bdev["busy_us"])
    assert dev["idle_pct"]["delta"] == pytest.approx(ndev["idle_pct"] - bdev["idle_pct"])
    assert d["steps"]["p50_us"]["delta"] == pytest.approx(
        (n["steps"]["duration_us"]["p50"] or 0) - (b["steps"]["duration_us"]["p50"] or 0))
    for m in ("delay_us", "latency_us"):
        assert d["launch"][m]["p90"]["delta"] == pytest.approx(n["launch"][m]["p90"] - b["launch"][m]["p90"])
    kb = {r["raw_name"]: r for r in b["kernels"]["by_name"]}
    kn = {r["raw_name"]: r for r in n["kernels"]["by_name"]}
    rows = {r["raw_name"]: r for r in d["kernels"]["by_name"]}
    assert set(rows) == set(kb) | set(kn)
    for name, r in rows.items():
        expected = kn.get(name, {}).get("total_us", 0) - kb.get(name, {}).get("total_us", 0)
        assert r["total_us"]["delta"] == pytest.approx(expected)
        assert r["status"] == ("added" if name not in kb else "removed" if name not in kn else r["status"])
    assert [abs(r["total_us"]["delta"]) for r in d["kernels"]["by_name"]] == \
        sorted((abs(r["total_us"]["delta"]) for r in d["kernels"]["by_name"]), reverse=True)
    ob = {r["name"]: r for r in b["operators"]["by_name"]}
    on = {r["name"]: r for r in n["operators"]["by_name"]}
    for r in d["operators"]:
        expected = on.get(r["name"], {}).get("self_gpu_us", 0) - ob.get(r["name"], {}).get("self_gpu_us", 0)
        assert r["self_gpu_us"]["delta"] == pytest.approx(expected)
    mb = {r["type"]: r for r in (b["operators"]["modules"] or {}).get("by_type", [])}
    mn = {r["type"]: r for r in (n["operators"]["modules"] or {}).get("by_type", [])}
    assert {r["type"] for r in d["modules"]} == set(mb) | set(mn)
    if base == MEMORY:
        assert mb and mn
    for r in d["modules"]:
        for f in ("self_gpu_us", "calls"):
            assert r[f]["delta"] == pytest.approx(mn.get(r["type"], {}).get(f, 0) - mb.get(r["type"], {}).get(f, 0))
    for direction, fields in d["memcpy"].items():
        src_b = b["memset"] if direction == "Memset" else b["memcpy"].get(direction, {})
        src_n = n["memset"] if direction == "Memset" else n["memcpy"].get(direction, {})
        assert fields["bytes"]["delta"] == src_n.get("bytes", 0) - src_b.get("bytes", 0)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "otel_profiler", "diff", *args],
                          capture_output=True, text=True, timeout=600)


def test_cli_json_and_table(tmp_path):
    out = tmp_path / "d.json"
    done = _cli(str(trace(BASE)), str(trace(NEW)), "--format", "json", "-o", str(out))
    assert done.returncode == 0, done.stderr
    d = json.loads(out.read_text())
    assert d["schema"] == "otel-profiler.diff/1"
    assert d == json.loads(json.dumps(diff(_summary(BASE), _summary(NEW)) | {
        "base": d["base"], "new": d["new"]}))
    table = _cli(str(trace(BASE)), str(trace(NEW)), "--top", "3")
    assert table.returncode == 0
    top = d["kernels"]["by_name"][0]
    assert "== Kernels by time change (top 3 of" in table.stdout and top["short_name"][:40] in table.stdout


def test_cli_bad_input_is_one_line(tmp_path):
    done = _cli(str(trace(BASE)), str(tmp_path / "missing.json"))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "missing.json" in done.stderr and "Traceback" not in done.stderr
