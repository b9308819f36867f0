"""``otel-profiler export --format pprof``: the repository's GPU traces written as pprof profiles, read
back by ``go tool pprof`` (``-raw`` and ``-top``), whose totals equal the summary's to the nanosecond;
the stack model agrees with the operator and module views; bad input gives one line and exit 2.

The summary gives times in µs as floats (``sum of ns / 1e3``); ``round(µs * 1e3)`` is the exact ns
sum for any total below 2**52 ns, so the comparisons are exact.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from conftest import trace
from cuda_tracer.model.correlate import correlate
from cuda_tracer.model.events import Kind
from cuda_tracer.loading import load_profile
from otel_profiler.analysis.attribution.modules import PREFIX, modules
from otel_profiler.analysis.attribution.operators import OPERATOR_KINDS, STEP_ROW, kernel_operators
from otel_profiler.analysis.attribution.stacks import stack_model
from otel_profiler.export import pprof

TRACES = {
    "two_ranks": "hta/trace_filter",  # a folder: ranks 0 and 1
    "python_stacks": "tracelens/b200/eager_trace.json.gz",  # python_function and nn.Module events
    "sync": "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
    "memset": "kineto_tb_plugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz",
}
GO = shutil.which("go")
_SAMPLE = re.compile(r"^\s*(-?\d+)\s+(-?\d+)\s+(-?\d+):")
_LABEL = re.compile(r"(\w+):\[([^\]]*)\]")


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "otel_profiler", *args], capture_output=True,
                          text=True, timeout=600)


def go_pprof(*args: str) -> str:
    done = subprocess.run([GO, "tool", "pprof", *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout


def ns(us: float) -> int:
    return round(us * 1e3)


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Callable[[str], tuple[Path, dict]]:
    """For a name of ``TRACES``: (the pprof file ``export --format pprof`` wrote, the summary
    JSON), each made once."""
    made: dict[str, tuple[Path, dict]] = {}

    def make(name: str) -> tuple[Path, dict]:
        if name not in made:
            source = str(trace(TRACES[name]))
            out = tmp_path_factory.mktemp("pprof") / f"{name}.pb.gz"
            done = cli("export", source, "--format", "pprof", "-o", str(out))
            assert done.returncode == 0, done.stderr
            summary = cli("summary", "--format", "json", source)
            assert summary.returncode == 0, summary.stderr
            made[name] = out, json.loads(summary.stdout)
        return made[name]
    return make


def raw_samples(path: Path) -> list[tuple[tuple[int, int, int], dict[str, str]]]:
    """``go tool pprof -raw``: each sample's (gpu_time, cpu_time, launches) and labels."""
    text = go_pprof("-raw", str(path))
    lines = text.split("Samples:\n", 1)[1].split("\nLocations", 1)[0].splitlines()
    assert lines[0].split() == ["gpu_time/nanoseconds[dflt]", "cpu_time/nanoseconds", "launches/count"]
    out: list[tuple[tuple[int, int, int], dict[str, str]]] = []
    for line in lines[1:]:
        sample = _SAMPLE.match(line)
        if sample:
            out.append((tuple(int(v) for v in sample.groups()), {}))
        else:
            out[-1][1].update(_LABEL.findall(line))
    return out


def expected_gpu_ns(summary: dict) -> dict[tuple[str, str], int]:
    """The summary's GPU totals in ns by (label, value): kernels, each copy direction, memsets,
    syncs, and each kernel class."""
    out = {("kind", "kernel"): ns(summary["kernels"]["total_us"]),
           ("kind", "memset"): ns(summary["memset"]["total_us"]),
           ("kind", "sync"): ns(summary["sync"]["total_us"]),
           ("kind", "memcpy"): sum(ns(c["total_us"]) for c in summary["memcpy"].values())}
    out.update({("copy", direction): ns(c["total_us"]) for direction, c in summary["memcpy"].items()})
    return out


@pytest.mark.skipif(GO is None, reason="go (for go tool pprof) is not installed")
@pytest.mark.parametrize("name", sorted(TRACES))
def test_go_pprof_reads_the_totals_of_the_summary(exported, name: str):
    path, summary = exported(name)
    samples = raw_samples(path)
    assert samples
    gpu: dict[tuple[str, str], int] = defaultdict(int)
    launches: dict[str, int] = defaultdict(int)
    for (gpu_ns, _, count), labels in samples:
        for key in ("kind", "copy"):
            if key in labels:
                gpu[key, labels[key]] += gpu_ns
        launches[labels["kind"]] += count
    expected = expected_gpu_ns(summary)
    assert {k: gpu.get(k, 0) for k in expected} == expected
    assert launches["kernel"] == summary["kernels"]["count"]
    assert launches["memcpy"] == sum(c["count"] for c in summary["memcpy"].values())
    assert launches.get("operator", 0) == 0
    gpu_total = sum(v for (key, _), v in expected.items() if key == "kind")
    assert gpu_total > 0
    top = go_pprof("-top", "-unit=ns", "-sample_index=gpu_time", str(path))
    assert f"Total samples = {gpu_total}ns" in top
    kernels = go_pprof("-top", "-unit=ns", "-sample_index=gpu_time", "-tagfocus=kind=kernel",
                       "-nodecount=1000000", "-nodefraction=0", "-edgefraction=0", str(path))
    assert f"Showing nodes accounting for {expected['kind', 'kernel']}ns" in kernels
    # CPU time: the operators' self CPU times, which add up to the outermost operators' time
    self_cpu = sum(row["self_cpu_us"] for row in summary["operators"]["by_name"])
    assert sum(s[0][1] for s in samples) == ns(self_cpu)


@pytest.mark.skipif(GO is None, reason="go (for go tool pprof) is not installed")
def test_each_rank_has_its_own_totals(exported):
    path, summary = exported("two_ranks")
    per_rank: dict[str, dict[tuple[str, str], int]] = defaultdict(lambda: defaultdict(int))
    for (gpu_ns, _, _), labels in raw_samples(path):
        per_rank[labels["rank"]]["kind", labels["kind"]] += gpu_ns
    assert sorted(per_rank) == sorted(summary["ranks"]) == ["0", "1"]
    for rank, rank_summary in summary["ranks"].items():
        expected = {k: v for k, v in expected_gpu_ns(rank_summary).items() if k[0] == "kind"}
        assert {k: per_rank[rank].get(k, 0) for k in expected} == expected


@pytest.mark.parametrize("name", ["memset", "python_stacks", "two_ranks"])
def test_kernels_sit_under_the_operator_the_operator_view_gives_them(name: str):
    batch = load_profile([str(trace(TRACES[name]))]).batch()
    corr = correlate(batch)
    model = stack_model(batch, corr)
    krows, op_rows = kernel_operators(batch, corr)
    names = np.where(op_rows >= 0, batch.name[np.maximum(op_rows, 0)], -1)
    is_step = (op_rows >= 0) & (batch.kind[np.maximum(op_rows, 0)] == Kind.STEP)
    expected = [STEP_ROW if step else batch.strings[n] if n >= 0 else None
                for n, step in zip(names.tolist(), is_step.tolist())]
    operator_names = {batch.strings[i] for i in np.unique(batch.name[
        np.isin(batch.kind, np.asarray(OPERATOR_KINDS, np.uint8))]).tolist()} | {STEP_ROW}
    position = np.searchsorted(model.gpu_rows, krows)
    assert (model.gpu_rows[position] == krows).all()
    found = []
    for stack_id in model.gpu_stack[position].tolist():
        frames = [f for f in model.frames_of(stack_id)[2:] if f in operator_names]  # innermost first
        found.append(frames[0] if frames else None)
    assert sum(e is not None for e in expected) > 0.9 * len(expected)
    assert found == expected


def test_module_paths_of_the_stacks_give_the_module_view():
    batch = load_profile([str(trace(TRACES["python_stacks"]))]).batch()
    corr = correlate(batch)
    model = stack_model(batch, corr)
    kernel = batch.kind[model.gpu_rows] == Kind.KERNEL
    self_gpu: dict[str, int] = defaultdict(int)
    for stack_id, row in zip(model.gpu_stack[kernel].tolist(), model.gpu_rows[kernel].tolist()):
        path = "/".join(f[len(PREFIX):] for f in reversed(model.frames_of(stack_id)) if f.startswith(PREFIX))
        if path:
            self_gpu[path] += int(batch.end_ns[row] - batch.start_ns[row])
    view = {r["path"]: ns(r["self_gpu_us"]) for r in modules(batch, corr)["by_path"] if r["self_gpu_us"]}
    assert len(view) > 10
    assert dict(self_gpu) == view


@pytest.mark.skipif(GO is None, reason="go (for go tool pprof) is not installed")
def test_python_frames_carry_their_file_and_line(exported):
    path, _ = exported("python_stacks")
    text = go_pprof("-raw", str(path)).split("\nLocations", 1)[1]
    lines = re.findall(r"M=1 (\S+) (\S+\.py):(\d+):\d+ s=\d+\((\S+\.py)\((\d+)\): ", text)
    assert len(lines) > 50
    assert all(file == file2 and line == line2 for _, file, line, file2, line2 in lines)


@pytest.mark.parametrize("args, problem", [
    (["missing-trace.json.gz", "-o", "{folder}/out.pb.gz"], "missing-trace.json.gz"),
    (["{text}", "-o", "{folder}/out.pb.gz"], "text.json"),
    (["{trace}"], "-o"),
    (["{trace}", "-o", "{folder}/no/such/folder/out.pb.gz"], "out.pb.gz"),
    (["{trace}", "-o", "{folder}/out.pb.gz", "--endpoint", "http://127.0.0.1:4318"], "--endpoint"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], problem: str):
    text = tmp_path / "text.json"
    text.write_text("this is not a trace\n")
    values = {"text": str(text), "trace": str(trace(TRACES["sync"])), "folder": str(tmp_path)}
    done = cli("export", *[a.format(**values) for a in args], "--format", "pprof")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and problem in lines[0] and "Traceback" not in done.stderr
    assert not list(tmp_path.glob("**/*.pb.gz"))


@pytest.mark.parametrize("name, gpu_operations, operators", [
    ("hta/trace_file_list/inference_rank_1.json.gz", True, False),  # GPU work, no operator
    ("hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz", False, True),
])
def test_traces_without_gpu_work_or_without_operators(tmp_path: Path, name: str, gpu_operations: bool,
                                                      operators: bool):
    profile = load_profile([str(trace(name))])
    out = tmp_path / "out.pb.gz"
    totals = pprof.write(profile, str(out))
    decoded = pprof.profile_messages()["Profile"].FromString(gzip.decompress(out.read_bytes()))
    batch = profile.batch()
    gpu = np.isin(batch.kind, np.asarray([Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.SYNC], np.uint8))
    assert bool(gpu.any()) == gpu_operations
    assert sum(s.value[0] for s in decoded.sample) == totals["gpu_ns"] == int(batch.duration_ns[gpu].sum())
    assert sum(s.value[2] for s in decoded.sample) == int(gpu.sum())
    assert (sum(s.value[1] for s in decoded.sample) > 0) == operators
    strings = decoded.string_table
    assert [strings[t.type] for t in decoded.sample_type] == [t for t, _ in pprof.SAMPLE_TYPES]
    ids = {loc.id for loc in decoded.location}
    assert all(set(s.location_id) <= ids and s.location_id for s in decoded.sample)
