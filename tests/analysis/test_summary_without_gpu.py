"""Summaries and diffs of a profile without GPU work (a real CPU-only trace): GPU sections and columns
left out with one line saying why, CSV titles without a row limit, JSON with every section."""

from __future__ import annotations

import json
import subprocess
import sys

from cuda_tracer.loading import load_profile
from otel_profiler.analysis.summary import summarize
from otel_profiler.report.console import render_csv, render_json, render_table

from conftest import trace

CPU_ONLY = "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
GPU = "hta/trace_filter/sampled_rank-0.json.gz"


def _summary(rel: str) -> dict:
    return summarize(load_profile([str(trace(rel))]))


def test_text_and_csv_leave_gpu_sections_out_and_say_why():
    s = _summary(CPU_ONLY)
    text = render_table(s, width=100)
    assert "no GPU work recorded, so no GPU columns" in text and "Self GPU" not in text
    assert "note: no GPU activity in this profile" in text
    table = render_csv(s)
    assert table.startswith("# left out, no GPU activity in this profile: GPU temporal breakdown")
    assert "# GPU kernels by name" not in table and "top 1000000000" not in table and "(top " not in table
    assert "# Operators (" in table


def test_json_keeps_every_section():
    s = json.loads(render_json(_summary(CPU_ONLY)))
    for key in ("devices", "kernels", "memcpy", "memset", "runtime_api", "sync", "launch", "streams",
                "operators", "memory", "steps", "cpu"):
        assert key in s
    assert s["cpu"] == {}  # a trace file carries no CPU samples


def test_gpu_profile_csv_keeps_its_gpu_sections():
    table = render_csv(_summary(GPU))
    assert "# GPU kernels by name (" in table and "left out" not in table and "top 1000000000" not in table


def test_diff_of_runs_without_gpu_work_says_so_and_compares_cpu_time():
    path = str(trace(CPU_ONLY))
    out = subprocess.run([sys.executable, "-m", "otel_profiler", "diff", path, path], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "note: no GPU activity in either profile" in out.stdout
    assert "self_gpu_us" not in out.stdout and "Launch delay" not in out.stdout
    gpu = subprocess.run([sys.executable, "-m", "otel_profiler", "diff", str(trace(GPU)), str(trace(GPU))],
                         capture_output=True, text=True, timeout=600)
    assert "no GPU activity" not in gpu.stdout and "GPU temporal breakdown" in gpu.stdout


def test_diff_of_runs_without_gpu_work_orders_operators_by_cpu_time_change():
    """The largest change of CPU time comes first, not the first name: the operator last in name
    order is given 618 ms more self CPU time in the new run, another one 5 ms."""
    import copy

    from otel_profiler.analysis.diff import diff, tables

    base = _summary(CPU_ONLY)
    new = copy.deepcopy(base)
    rows = sorted(new["operators"]["by_name"], key=lambda r: r["name"])
    assert len(rows) >= 3
    rows[-1]["self_cpu_us"] += 618_000
    rows[1]["self_cpu_us"] += 5_000
    (title, header, table), = [t for t in tables(diff(base, new)) if t[0].startswith("Operators")]
    assert "by time change" in title and header[-1] == "Name"
    assert [row[-1] for row in table[:2]] == [rows[-1]["name"], rows[1]["name"]], table[:3]
