"""Folders of traces: ranks from each trace's distributed metadata, and traces that are not the
ranks of one job refused (or summarized one job at a time with ``summary --separate``)."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys

import pytest

from conftest import trace
from cuda_tracer.jobs import JOB_GAP_NS
from cuda_tracer.loading import load_profile

RANK0 = trace("hta/trace_filter/sampled_rank-0.json.gz")
RANK1 = trace("hta/trace_filter/sampled_rank-1.json.gz")
WORLD8 = trace("hta/trace_diff/control/control.json.gz")
WORLD2 = trace("hta/nccl_parser_config/nccl_data.json.gz")
QWEN = trace("tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
BERT = trace("tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz")


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "otel_profiler", *args], capture_output=True,
                          text=True, timeout=300)


def refused_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2 and result.stdout == "", result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "not part of the same job" in lines[0] and "--separate" in lines[0]
    return lines[0]


def edited(src, dst, edit) -> None:
    with gzip.open(src, "rt") as f:
        doc = json.load(f)
    edit(doc)
    with gzip.open(dst, "wt") as f:
        json.dump(doc, f)


def test_ranks_come_from_the_traces_not_from_the_file_order(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    shutil.copy(RANK1, folder / "a.json.gz")  # sorts first, is rank 1
    shutil.copy(RANK0, folder / "b.json.gz")
    profile = load_profile([str(folder)], one_job=True)
    assert [(r.rank, r.meta["file"]) for r in profile.ranks] == [
        (1, str(folder / "a.json.gz")), (0, str(folder / "b.json.gz"))]
    result = run_cli("summary", "--format", "json", str(folder))
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert [(m["rank"], m["file"]) for m in summary["ranks_meta"]] == [
        (1, str(folder / "a.json.gz")), (0, str(folder / "b.json.gz"))]
    assert set(summary["ranks"]) == {"0", "1"}


def test_different_world_sizes_are_refused():
    line = refused_line(run_cli("summary", str(WORLD8), str(WORLD2)))
    assert line.startswith(f"otel-profiler: error: {WORLD2}:")
    assert f"its world size is 2, that of {WORLD8} is 8" in line


def test_the_same_rank_twice_is_refused(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    shutil.copy(RANK0, folder / "first.json.gz")
    shutil.copy(RANK0, folder / "second.json.gz")
    line = refused_line(run_cli("summary", str(folder)))
    assert "has the same rank (0) as" in line and "first.json.gz" in line and "second.json.gz" in line


def test_the_same_file_given_twice_is_refused():
    line = refused_line(run_cli("summary", str(RANK0), str(RANK0)))
    assert "it is given twice" in line


def test_a_rank_beyond_the_world_size_is_refused(tmp_path):
    beyond = tmp_path / "rank-128.json.gz"
    edited(RANK1, beyond, lambda d: d["distributedInfo"].update(rank=128))
    line = refused_line(run_cli("summary", str(RANK0), str(beyond)))
    assert str(beyond) in line and "its rank 128 is not below its world size 128" in line


def test_unrelated_traces_of_different_models_are_refused(shared_traces):
    """Two single-GPU traces of different models, without distributed metadata, recorded hours
    apart: not the ranks of one job."""
    line = refused_line(run_cli("summary", str(shared_traces / "tracelens" / "h100")))
    assert "hours apart" in line and QWEN.name in line and BERT.name in line


@pytest.mark.parametrize("command", ["report", "export"])
def test_report_and_export_refuse_them_too(tmp_path, command):
    out = tmp_path / ("r.html" if command == "report" else "spans.jsonl")
    result = run_cli(command, str(WORLD8), str(WORLD2), "-o" if command == "report" else "--output",
                     str(out))
    refused_line(result)
    assert not out.exists()


def test_ranks_shifted_by_less_than_the_gap_are_one_job(tmp_path):
    """Clocks of the hosts of one job differ a little: still one job; beyond the gap, two."""
    def shift(seconds):
        def edit(doc):
            doc["distributedInfo"]["rank"] = 2
            for e in doc["traceEvents"]:
                if isinstance(e.get("ts"), (int, float)):
                    e["ts"] += seconds * 1e6
        return edit

    near, far = tmp_path / "near.json.gz", tmp_path / "far.json.gz"
    edited(RANK1, near, shift(60))
    edited(RANK1, far, shift(JOB_GAP_NS / 1e9 + 60))
    assert [r.rank for r in load_profile([str(RANK0), str(near)], one_job=True).ranks] == [0, 2]
    line = refused_line(run_cli("summary", str(RANK0), str(far)))
    assert str(far) in line and "minutes apart" in line


def test_separate_summarizes_each_job_on_its_own(tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    for src in (RANK0, RANK1, QWEN, BERT):
        shutil.copy(src, folder / src.name)
    result = run_cli("summary", "--separate", "--format", "json", str(folder))
    assert result.returncode == 0, result.stderr
    jobs = json.loads(result.stdout)["jobs"]
    files = sorted(sorted(m["file"].rsplit("/", 1)[1] for m in job["ranks_meta"]) for job in jobs)
    assert files == sorted([[BERT.name], [QWEN.name], [RANK0.name, RANK1.name]])
    for job in jobs:  # each job's numbers are its own: events of its files only
        assert job["sources"] and all(s.startswith(str(folder)) for s in job["sources"])
    by_files = {tuple(sorted(m["file"] for m in j["ranks_meta"])): j for j in jobs}
    alone = load_profile([str(QWEN)])
    assert by_files[(str(folder / QWEN.name),)]["kernels"]["count"] == int(
        (alone.batch().kind == 1).sum())
    table = run_cli("summary", "--separate", str(folder))
    assert table.returncode == 0, table.stderr
    headings = [line for line in table.stdout.splitlines() if line.startswith("job ")]
    assert [h.split(":")[0] for h in headings] == ["job 1 of 3", "job 2 of 3", "job 3 of 3"]
