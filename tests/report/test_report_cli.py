"""``otel-profiler report``: the HTML file is self-contained, the timeline columns round-trip, the
Perfetto (Chrome trace JSON) output is well formed, and bad input ends with one error line, exit 2."""

from __future__ import annotations

import base64
import gzip
import json
import re
import subprocess
import sys

import numpy as np
import pytest

from cuda_tracer.model.correlate import correlate
from cuda_tracer.model.events import Kind
from cuda_tracer.loading import load_profile
from otel_profiler.report.html import timeline_data
from otel_profiler.report.perfetto import chrome_trace
from otel_profiler.report.tracks import HIDDEN_KINDS

from conftest import trace

SMALL = str(trace("hta/trace_filter/sampled_rank-0.json.gz"))
NCCL = str(trace("hta/nccl_parser_config/nccl_data.json.gz"))


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "otel_profiler", *args], capture_output=True, text=True)


def test_html_report_is_self_contained(tmp_path):
    out = tmp_path / "r.html"
    done = _cli("report", SMALL, "-o", str(out))
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert text.startswith("<!DOCTYPE html>")
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", text, re.IGNORECASE)
    assert "default-src 'none'" in text  # the page may not fetch anything
    data = text.split('<script type="application/json" id="report-data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in data
    assert json.loads(data)["summary"]["kernels"]["count"] == 1154


def _column(data: dict, name: str, dtype: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(data["columns"][name]), dtype=dtype)


def test_timeline_columns_round_trip():
    profile = load_profile([NCCL])
    batch = profile.batch()
    data = timeline_data(profile)
    shown = ~np.isin(batch.kind, np.asarray(HIDDEN_KINDS, np.uint8))
    assert data["count"] == int(shown.sum())
    kinds = _column(data, "kind", "u1")
    assert np.bincount(kinds, minlength=17).tolist() == \
        np.bincount(batch.kind[shown], minlength=17).tolist()
    start, dur = _column(data, "start", "<f8"), _column(data, "dur", "<u4")
    track = _column(data, "track", "<u4")
    assert (np.diff(track.astype(np.int64)) >= 0).all()  # sorted by track, then start
    same = np.diff(track.astype(np.int64)) == 0
    assert (np.diff(start)[same] >= 0).all()
    name_index = _column(data, "name", "<u4")
    # The recorded name comes back from "raw" where the shown one is demangled, else from "strings".
    names = [data["raw"][i] or data["strings"][i] for i in name_index]
    kernel = kinds == Kind.KERNEL
    assert dur[kernel].sum() == (batch.end_ns - batch.start_ns)[batch.kind == Kind.KERNEL].sum()
    assert sorted(n for n, k in zip(names, kernel) if k) == sorted(batch.names(np.flatnonzero(batch.kind == Kind.KERNEL)))
    shown_names = {data["strings"][i] for i, k in zip(name_index, kernel) if k}
    assert not any(n.startswith("_Z") for n in shown_names)  # this trace records CUTLASS kernels mangled
    assert sum(r is not None for r in data["raw"]) >= 2
    assert len(data["short"]) == len(data["strings"])
    src, dst = _column(data, "flow_src", "<u4"), _column(data, "flow_dst", "<u4")
    assert len(src) == correlate(batch).matched.sum()
    assert np.isin(kinds[src], [Kind.RUNTIME, Kind.DRIVER]).all()
    assert np.isin(kinds[dst], [Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET]).all()
    assert (start[dst] >= start[src]).all()


def test_perfetto_trace(tmp_path):
    out = tmp_path / "t.json"
    done = _cli("report", NCCL, "--format", "perfetto", "-o", str(out))
    assert done.returncode == 0, done.stderr
    doc = json.loads(out.read_text())
    events = doc["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    profile = load_profile([NCCL])
    assert len(complete) == timeline_data(profile)["count"]
    threads = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {(e["pid"], e["tid"]) for e in complete} <= threads
    assert min(e["ts"] for e in complete) == 0 and all(e["dur"] >= 0 for e in complete)
    starts = [e for e in events if e["ph"] == "s"]
    finishes = [e for e in events if e["ph"] == "f"]
    assert len(starts) == len(finishes) == correlate(profile.batch()).matched.sum()
    assert all(f["bp"] == "e" for f in finishes)
    assert chrome_trace(profile)["traceEvents"][0]["ph"] == "M"


@pytest.mark.parametrize("case", ["missing", "corrupt_gzip", "empty", "not_a_trace", "bad_threshold",
                                  "unwritable"])
def test_bad_input_one_error_exit_2(tmp_path, case):
    args = [SMALL]
    if case == "missing":
        args = [str(tmp_path / "nope.json")]
    elif case == "corrupt_gzip":
        bad = tmp_path / "bad.json.gz"
        bad.write_bytes(gzip.compress(b'{"traceEvents": []}')[:20])
        args = [str(bad)]
    elif case == "empty":
        (tmp_path / "empty.json").write_text("")
        args = [str(tmp_path / "empty.json")]
    elif case == "not_a_trace":
        (tmp_path / "x.json").write_text('{"traceEvents": 3}')
        args = [str(tmp_path / "x.json")]
    elif case == "bad_threshold":
        args += ["--threshold", "no_such=1"]
    out = tmp_path / "r.html" if case != "unwritable" else tmp_path / "no" / "dir" / "r.html"
    done = _cli("report", *args, "-o", str(out))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("otel-profiler: error: ")
    assert not out.exists()


def test_dashboard_extras_add_up():
    from otel_profiler.analysis.activity import kernel_precision, utilization_over_time
    from otel_profiler.analysis.summary import summarize

    profile = load_profile([NCCL])
    summary = summarize(profile)
    util = utilization_over_time(profile.batch())
    assert util.keys() == summary["devices"].keys()
    for key, u in util.items():
        assert sum(u["busy_us"]) == pytest.approx(summary["devices"][key]["busy_us"], rel=1e-9)
        assert len(u["util_pct"]) == 100 and 0 <= min(u["util_pct"]) <= max(u["util_pct"]) <= 100 + 1e-9
    assert kernel_precision("volta_sgemm_128x64_nn") == "fp32"
    assert kernel_precision("ampere_fp16_s16816gemm_fp16_128x128") == "fp16"
    assert kernel_precision("sm80_xmma_gemm_bf16bf16_bf16f32") == "bf16"
    assert kernel_precision("void at::native::vectorized_elementwise_kernel<4>") == "unknown"
