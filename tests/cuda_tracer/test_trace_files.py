"""The trace reader against a plain recount of the raw JSON of every shared trace."""

from __future__ import annotations

import collections
import gzip
import json
import re
from decimal import Decimal

import numpy as np
import pytest

from conftest import ALL_TRACES, trace
from cuda_tracer.model.events import Kind, MemcpyKind, SyncKind
from cuda_tracer.loading import load_profile

# The recount's own category table, written from the Kineto category list, not from the reader.
RECOUNT_KIND = {
    "kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy", "gpu_memset": "memset",
    "memset": "memset", "cuda_runtime": "runtime", "runtime": "runtime", "cuda_driver": "driver",
    "cpu_op": "cpu_op", "operator": "cpu_op", "user_annotation": "user_annotation",
    "gpu_user_annotation": "gpu_user_annotation", "cuda_sync": "sync",
    "python_function": "python_function", "overhead": "overhead", "trace": "profiler",
}


def raw_events(path):
    with gzip.open(path, "rt") as f:
        doc = json.load(f, parse_float=Decimal)
    return doc, doc["traceEvents"] if isinstance(doc, dict) else doc


def recount(path) -> dict[str, int]:
    _, events = raw_events(path)
    counts = collections.Counter()
    for e in events:
        if e.get("ph") == "X":
            kind = RECOUNT_KIND.get(str(e.get("cat", "")).lower(), "other")
            if kind in ("cpu_op", "user_annotation") and re.fullmatch(r"ProfilerStep#\d+", e["name"]):
                kind = "step"
            counts[kind] += 1
        elif e.get("ph") in ("i", "I"):
            counts["memory" if e.get("name") == "[memory]" else "instant"] += 1
    return dict(counts)


@pytest.mark.parametrize("path", ALL_TRACES, ids=lambda p: p.name[:40])
def test_counts_per_kind_equal_a_recount_of_the_raw_json(path):
    rank = load_profile([str(path)]).ranks[0]
    assert rank.batch.counts_by_kind() == recount(path)
    assert rank.meta["skipped_events"] == 0


@pytest.mark.parametrize("path", ALL_TRACES, ids=lambda p: p.name[:40])
def test_gpu_op_times_are_ns_exact(path):
    """Every kernel's start and end equal the JSON's decimal µs (plus baseTimeNanoseconds) in ns."""
    doc, events = raw_events(path)
    base = int(doc.get("baseTimeNanoseconds", 0)) if isinstance(doc, dict) else 0
    expected = sorted((base + int(Decimal(e["ts"]) * 1000),
                       base + int(Decimal(e["ts"]) * 1000) + int(Decimal(e["dur"]) * 1000))
                      for e in events if e.get("ph") == "X" and str(e.get("cat")).lower() == "kernel")
    batch = load_profile([str(path)]).ranks[0].batch
    k = batch.kind == Kind.KERNEL
    got = sorted(zip(batch.start_ns[k].tolist(), batch.end_ns[k].tolist()))
    assert got == expected


def test_legacy_2021_format_links_and_streams():
    batch = load_profile([str(trace("kineto_tb_plugin/resnet50_num_workers_0/"
                                    "worker0.1623143089861.pt.trace.json.gz"))]).ranks[0].batch
    kernels = batch.kind == Kind.KERNEL
    assert set(batch.stream[kernels].tolist()) == {7}  # tid was the string "stream 7"
    assert (batch.external_id[kernels] >= 0).all()  # from the lowercase "external id"
    memcpy = batch.kind == Kind.MEMCPY
    assert set(batch.subkind[memcpy].tolist()) == {MemcpyKind.HtoD}


def test_sync_events_carry_their_kind_and_wait_targets():
    batch = load_profile([str(trace("hta/critical_path/cuda_event_sync_multi_stream/"
                                    "event_sync_trace.json.gz"))]).ranks[0].batch
    sync = np.flatnonzero(batch.kind == Kind.SYNC)
    kinds = collections.Counter(SyncKind(s).name for s in batch.subkind[sync].tolist())
    assert kinds == {"EVENT": 3, "STREAM_WAIT_EVENT": 1, "CONTEXT": 1}
    _, events = raw_events(trace("hta/critical_path/cuda_event_sync_multi_stream/event_sync_trace.json.gz"))
    raw = [e["args"] for e in events if e.get("cat") == "cuda_sync"]
    waits = batch.extra("wait_on_stream")
    assert set(waits) <= set(sync.tolist())
    assert sorted(waits.values()) == sorted(a["wait_on_stream"] for a in raw if "wait_on_stream" in a)
    assert sorted(batch.extra("wait_on_event_id").values()) == sorted(
        a["wait_on_cuda_event_id"] for a in raw if "wait_on_cuda_event_id" in a)


def test_rocm_trace_with_hex_string_streams_in_runtime_args():
    batch = load_profile([str(trace("hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"))]
                         ).ranks[0].batch
    runtime = batch.kind == Kind.RUNTIME
    assert any(n.startswith("hip") for n in batch.names(np.flatnonzero(runtime)))
    assert (batch.device[batch.kind == Kind.KERNEL] == 2).all()


def test_steps_have_numbers_from_profilerstep_names():
    batch = load_profile([str(trace("hta/negative_queue_length_values_check/rank0.json.gz"))]
                         ).ranks[0].batch
    steps = np.flatnonzero(batch.kind == Kind.STEP)
    numbers = batch.extra("step")
    assert [numbers[int(r)] for r in steps] == [int(n.split("#")[1]) for n in batch.names(steps)]


def test_distributed_info_gives_rank_and_world_size():
    meta = load_profile([str(trace("hta/trace_diff/control/control.json.gz"))]).ranks[0].meta
    assert (meta["rank"], meta["world_size"]) == (3, 8)


def test_a_folder_of_per_rank_traces_becomes_one_profile(shared_traces):
    profile = load_profile([str(shared_traces / "hta" / "trace_filter")])
    assert [r.rank for r in profile.ranks] == [0, 1]
    batch = profile.batch()
    assert sorted(set(batch.rank.tolist())) == [0, 1]
    assert len(batch) == sum(len(r.batch) for r in profile.ranks)


READ_IN_PARALLEL = """
import json, shutil, sys
from cuda_tracer import loading
folder, bad = sys.argv[1], sys.argv[2]
tasks = [(loading.TRACE_JSON, f) for f in sorted(__import__("glob").glob(folder + "/*"))]
assert loading._worker_count(tasks, 2) == 2  # this run really takes the process pool
one, two = loading.load_profile([folder], workers=1), loading.load_profile([folder], workers=2)
same = [r1.meta == r2.meta and all((r1.batch.columns[c] == r2.batch.columns[c]).all()
                                   for c in r1.batch.columns) and r1.batch.strings == r2.batch.strings
        for r1, r2 in zip(one.ranks, two.ranks)]
try:
    loading.load_profile([folder, bad], workers=2)
    error = None
except loading.TraceError as exc:
    error = [exc.path, exc.problem]
print(json.dumps({"ranks": [r.rank for r in two.ranks], "sources": two.sources == one.sources,
                  "same": same, "error": error}))
"""


def test_per_rank_files_read_in_parallel_give_the_same_profile(shared_traces, tmp_path):
    """Read by a pool of forked processes (a fresh single-threaded interpreter, as the CLI is):
    equal to reading them one by one, in input order, and a bad file still names itself."""
    import subprocess
    import sys

    bad = tmp_path / "broken.json.gz"
    bad.write_bytes(gzip.compress(b'{"traceEvents": [')[:-6])
    out = subprocess.run([sys.executable, "-c", READ_IN_PARALLEL, str(shared_traces / "hta" / "trace_filter"),
                          str(bad)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["ranks"] == [0, 1] and result["sources"] and result["same"] == [True, True]
    assert result["error"][0] == str(bad) and "gzip" in result["error"][1]


READER_KILLED = """
import os, signal, sys
from cuda_tracer import loading
read = loading.read_trace
def read_or_die(path, *args):  # the second file's reader dies as if the OOM killer took it
    if path.endswith("rank-1.json.gz"):
        os.kill(os.getpid(), signal.SIGKILL)
    return read(path, *args)
loading.read_trace = read_or_die
try:
    loading.load_profile([sys.argv[1]], workers=2)
except loading.TraceError as exc:
    print(exc)
"""


def test_a_killed_reader_process_is_one_clear_error(shared_traces):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", READER_KILLED, str(shared_traces / "hta" / "trace_filter")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert "trace_filter" in out.stdout and "reader process was killed (out of memory?)" in out.stdout
