"""What a person reads, on the repository's traces: platform words (a ROCm trace among them), blocking
copies counted as synchronization, grid/block per kernel, demangled names in the summary and in the
Perfetto trace, console output that folds what a profile lacks into one line and wraps insights,
help text for every argument, timeline tracks that open on the GPU with sensible labels, and
``trigger`` reporting what it sent or that nothing answers.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import socket
import subprocess
import sys
from collections import Counter
from functools import lru_cache

import pytest

from cuda_tracer.loading import load_profile
from otel_profiler.analysis.insights import insights, thresholds_doc
from otel_profiler.analysis.summary import summarize
from otel_profiler.cli import build_parser, main
from otel_profiler.report.console import render_table
from otel_profiler.report.perfetto import chrome_trace
from otel_profiler.report.tracks import assign_tracks

from conftest import trace

ROCM = "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"  # MI250, hip* calls
CPU_ONLY = "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
BERT = "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
B200 = "tracelens/b200/eager_trace.json.gz"  # Python function events, Kineto overhead events (pid -1)
NCCL = "hta/nccl_parser_config/nccl_data.json.gz"  # mangled CUTLASS kernels
RESNET = "kineto_tb_plugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
RANKS = "hta/trace_filter"


@lru_cache(maxsize=None)
def _summary(rel: str):
    profile = load_profile([str(trace(rel))])
    summary = summarize(profile)
    summary["insights"] = insights(profile, summary)
    return profile, summary


def _events(rel: str) -> list[dict]:
    with gzip.open(trace(rel)) as f:
        return json.load(f)["traceEvents"]


def test_rocm_trace_reads_as_hip():
    _, s = _summary(ROCM)
    assert s["platform"] == "rocm"
    text = render_table(s)
    assert "== HIP API calls" in text and "CUDA API calls" not in text
    assert "hipLaunchKernel" in text
    for rel in (BERT, NCCL):
        assert _summary(rel)[1]["platform"] == "cuda"
        assert "== CUDA API calls" in render_table(_summary(rel)[1])
    assert _summary(CPU_ONLY)[1]["platform"] == "unknown"


def test_blocking_copies_count_as_synchronization():
    _, s = _summary(ROCM)
    api = {r["name"]: r for r in s["sync"]["api"]}
    calls = {r["name"]: r for r in s["runtime_api"]}
    # hipMemcpyWithStream returns once the copy is done: a blocking copy, next to the explicit sync.
    assert api["hipMemcpyWithStream"]["blocking"] == "copy"
    assert api["hipMemcpyWithStream"]["total_us"] == calls["hipMemcpyWithStream"]["total_us"] > 0
    assert api["hipDeviceSynchronize"]["blocking"] == "sync"
    assert s["sync"]["host_blocked_us"] == pytest.approx(
        calls["hipMemcpyWithStream"]["total_us"] + calls["hipDeviceSynchronize"]["total_us"])
    assert "blocking copy hipMemcpyWithStream" in render_table(s)
    # cudaMemcpyAsync does not block; cudaStreamWaitEvent makes a stream, not the host, wait.
    _, r = _summary(RESNET)
    assert all(x["name"] != "cudaMemcpyAsync" for x in r["sync"]["api"])


def test_kernel_rows_carry_grid_and_block_of_the_trace():
    _, s = _summary(BERT)
    launches: dict[str, Counter] = {}
    for e in _events(BERT):
        if e.get("cat") == "kernel":
            a = e["args"]
            launches.setdefault(e["name"], Counter())[(tuple(a["grid"]), tuple(a["block"]))] += 1
    rows = s["kernels"]["by_name"]
    assert len(rows) == len(launches)
    for r in rows:
        counts = launches[r["raw_name"]]
        top = max(counts.values())
        assert (tuple(r["grid"]), tuple(r["block"])) in {g for g, c in counts.items() if c == top}
        assert r["launch_configs"] == len(counts)
    text = render_table(s)
    assert "Grid" in text and "Block" in text
    first = rows[0]
    assert "x".join(map(str, first["grid"])) in text
    # A trace without launch geometry says so with a dash, not a zero.
    assert all(r["grid"] is None for r in _summary(ROCM)[1]["kernels"]["by_name"])


def test_summary_and_perfetto_show_demangled_names_and_keep_the_raw_one():
    profile, s = _summary(NCCL)
    mangled = [r for r in s["kernels"]["by_name"] if r["raw_name"].startswith("_Z")]
    assert len(mangled) == 2
    for r in mangled:
        assert r["name"].startswith("void cutlass_cudnn_train::Kernel<") and r["short_name"].startswith("Kernel<")
        assert len(r["short_name"]) <= 90 < len(r["name"])
    assert not any(line.count("_ZN") for line in render_table(s).splitlines())
    doc = chrome_trace(profile)
    raw = [e for e in doc["traceEvents"] if e.get("ph") == "X" and "raw_name" in e.get("args", {})]
    assert raw and all(e["args"]["raw_name"].startswith("_Z") and not e["name"].startswith("_Z") for e in raw)
    assert not any(e["name"].startswith("_Z") for e in doc["traceEvents"] if e.get("ph") == "X")


def test_console_folds_missing_sections_into_one_line():
    _, s = _summary(CPU_ONLY)
    text = render_table(s, width=100)
    assert "(none)" not in text
    lacks = [line for line in text.splitlines() if line.startswith("not in this profile:")]
    assert len(lacks) == 1
    assert "== User annotations" in text and "== Steps (1)" in text  # what it has
    assert "== GPU kernels" not in text and "== Synchronization" not in text
    # A GPU profile shows its GPU sections and folds only what it lacks.
    text = render_table(_summary(RESNET)[1])
    assert "== GPU kernels by name" in text and "== Stream idle breakdown" in text
    assert "(none)" not in text


def test_insights_are_wrapped_not_cut():
    _, s = _summary(RESNET)
    assert s["insights"]
    text = render_table(s, width=72)
    block = text[text.index("== Insights"):]
    block = block[:block.index("not in this profile")] if "not in this profile" in block else block
    lines = block.splitlines()
    assert all(len(line) <= 72 for line in lines)
    words = " ".join(block.split())
    for i in s["insights"]:
        assert " ".join(i["evidence"].split()) in words
        assert " ".join(i["recommendation"].split()) in words


def test_every_argument_has_help_and_thresholds_are_listed():
    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in subs.choices.items():
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            assert action.help, f"{name} {action.dest} has no help"
        text = " ".join(sub.format_help().split())  # as read, whatever the terminal's width
        for action in sub._actions:
            if action.default not in (None, False, [], argparse.SUPPRESS) and action.option_strings:
                assert "default" in (action.help or "") or f"(default: {action.default})" in text, \
                    f"{name} {action.dest}"
    for name in ("summary", "report"):
        text = " ".join(subs.choices[name].format_help().split())
        for t in thresholds_doc():
            assert t["name"] in text
    out = subprocess.run([sys.executable, "-m", "otel_profiler", "summary", "--help"],
                         capture_output=True, text=True, check=True).stdout
    out = " ".join(out.split())
    assert "INPUT" in out and "(default: table)" in out and "gpu_util_low_pct" in out


def test_summary_threshold_option(tmp_path):
    path = str(trace(RESNET))
    out = subprocess.run([sys.executable, "-m", "otel_profiler", "summary", path, "--format", "json",
                          "--threshold", "gpu_util_low_pct=50"], capture_output=True, text=True, check=True)
    rules = {i["rule"] for i in json.loads(out.stdout)["insights"]}
    assert "low_gpu_utilization" not in rules  # busy 60.6%, above 50
    bad = subprocess.run([sys.executable, "-m", "otel_profiler", "summary", path, "--threshold", "nope=1"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "nope" in bad.stderr


def test_timeline_tracks_open_on_the_gpu_with_readable_labels():
    t = assign_tracks(load_profile([str(trace(B200))]))
    labels = [tr.label for tr in t.tracks]
    assert t.tracks[0].kind == "gpu"
    assert "Profiler overhead" in labels  # Kineto's overhead events have pid -1
    assert not any("-1 ·" in lb or "process -1" in lb for lb in labels)
    assert all(tr.collapsed for tr in t.tracks if tr.kind == "cpu")
    assert not any(tr.collapsed for tr in t.tracks if tr.kind == "gpu")
    # Several ranks: each rank's GPU streams come before its host tracks, and the group names the file.
    t = assign_tracks(load_profile([str(trace(RANKS))]))
    for rank in {tr.rank for tr in t.tracks}:
        kinds = [tr.kind for tr in t.tracks if tr.rank == rank]
        assert kinds[0] == "gpu" and kinds.index("cpu") > max(i for i, k in enumerate(kinds) if k == "gpu")
    assert all("sampled_rank-" in tr.group for tr in t.tracks)
    doc = chrome_trace(load_profile([str(trace(B200))]))
    processes = [e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"]
    assert "GPU" in processes[0]


def test_rank_table_names_each_file():
    _, s = _summary(RANKS)
    text = render_table(s)
    assert "== Ranks (2)" in text
    assert "sampled_rank-0.json.gz" in text and "sampled_rank-1.json.gz" in text


# ---------------------------------------------------------------- trigger
def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_trigger_reports_a_port_nobody_listens_on(capsys):
    port = _free_udp_port()
    assert main(["trigger", "--port", str(port)]) == 1
    err = capsys.readouterr().err
    assert f"nothing listens on trigger port {port}" in err and len(err.strip().splitlines()) == 1


def test_trigger_says_what_it_sent(capsys):
    from otel_profiler.live.windows.triggers import private_folder, socket_name, trigger_folder

    port = _free_udp_port()
    path = os.path.join(private_folder(trigger_folder()), socket_name(port))
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:  # the job's trigger socket
        listener.bind(path)
        try:
            listener.settimeout(30)
            assert main(["trigger", "--port", str(port)]) == 0
            data = listener.recv(64)
        finally:
            os.unlink(path)
    assert data == b"capture"
    assert f"sent a capture request (one datagram) to trigger port {port} ({path})" in capsys.readouterr().err


def test_trigger_never_signals_a_process_that_would_die_of_it(capsys):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert main(["trigger", "--pid", str(child.pid)]) == 1
        assert "does not handle SIGUSR2" in capsys.readouterr().err
        assert child.poll() is None  # still running: nothing was sent
    finally:
        child.kill()
        child.wait()
    assert main(["trigger", "--pid", str(child.pid)]) == 1  # reaped: no such process
    assert f"no process {child.pid}" in capsys.readouterr().err
