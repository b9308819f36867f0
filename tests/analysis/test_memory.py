"""GPU memory from the ``[memory]`` events of real traces, checked against a plain recount of the
raw trace JSON."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from decimal import Decimal

import pytest

from cuda_tracer.loading import load_profile
from otel_profiler.analysis.diff import diff
from otel_profiler.analysis.memory.allocator import memory_timeline
from otel_profiler.analysis.summary import summarize
from otel_profiler.report.console import render_table

from conftest import trace

WITH_TOTALS = ["hta/df_index_resolver/df_index_resolver.json.gz",
               "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
               "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"]
WITHOUT_TOTALS = "kineto_tb_plugin/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"


def _memory_events(relative: str) -> dict[str, list[dict]]:
    """GPU ``[memory]`` events per device id, in time order; ``t_ns`` added: the time in ns since
    the epoch (``ts`` µs after ``baseTimeNanoseconds`` where the trace has it)."""
    with gzip.open(trace(relative)) as f:
        doc = json.load(f)
    events, base = doc["traceEvents"], int(doc.get("baseTimeNanoseconds", 0))
    out = defaultdict(list)
    for e in events:
        if e.get("name") == "[memory]" and e["args"].get("Device Type", 0) != 0:
            e["t_ns"] = base + int(Decimal(str(e["ts"])) * 1000)
            out[str(e["args"]["Device Id"])].append(e)
    for v in out.values():
        v.sort(key=lambda e: e["t_ns"])
    return out


@pytest.mark.parametrize("relative", WITH_TOTALS)
def test_peak_equals_a_recount_of_the_events(relative):
    raw = _memory_events(relative)
    summary = summarize(load_profile([str(trace(relative))]))
    devices = summary["memory"]["devices"]
    assert set(devices) == set(raw) and raw
    for device, events in raw.items():
        d = devices[device]
        allocated = [e["args"]["Total Allocated"] for e in events]
        peak = max(allocated)
        assert d["baseline"] == "absolute"
        assert d["peak"]["allocated_bytes"] == peak
        assert d["peak_reserved_bytes"] == max(e["args"]["Total Reserved"] for e in events)
        first_peak = events[allocated.index(peak)]
        assert d["peak"]["time_ns"] == first_peak["t_ns"]
        assert d["events"] == len(events)
        assert d["allocations"] == sum(e["args"]["Bytes"] > 0 for e in events)
        assert d["final_allocated_bytes"] == allocated[-1]
        sizes = sorted((e["args"]["Bytes"] for e in events if e["args"]["Bytes"] > 0), reverse=True)
        assert [a["bytes"] for a in d["largest_allocations"]] == sizes[:len(d["largest_allocations"])]
        assert d["peak"]["operator"] and d["peak"]["step"] is not None
        steps = [s for s in d["steps"] if s["peak_allocated_bytes"] is not None]
        assert max(s["peak_allocated_bytes"] for s in steps) == peak
        for before, after in zip(d["steps"], d["steps"][1:]):
            assert after["growth_bytes"] == after["end_allocated_bytes"] - before["end_allocated_bytes"]


def test_traces_without_totals_count_from_the_window_start():
    raw = _memory_events(WITHOUT_TOTALS)
    d = summarize(load_profile([str(trace(WITHOUT_TOTALS))]))["memory"]["devices"]
    for device, events in raw.items():
        running, peak = 0, 0
        for e in events:
            running += e["args"]["Bytes"]
            peak = max(peak, running)
        assert d[device]["baseline"] == "window_start"
        assert d[device]["peak"]["allocated_bytes"] == peak
        assert d[device]["peak_reserved_bytes"] is None


def test_timeline_keeps_the_peak():
    batch = load_profile([str(trace(WITH_TOTALS[0]))]).batch()
    raw = _memory_events(WITH_TOTALS[0])
    timeline = memory_timeline(batch, points=200)
    for device, events in raw.items():
        t = timeline[device]
        assert len(t["t_us"]) <= 200 < len(events)
        assert max(t["allocated"]) == max(e["args"]["Total Allocated"] for e in events)
        assert max(t["reserved"]) == max(e["args"]["Total Reserved"] for e in events)
        assert t["t_us"] == sorted(t["t_us"])


def test_no_memory_events_leave_an_empty_section():
    summary = summarize(load_profile([str(trace("hta/trace_filter/sampled_rank-0.json.gz"))]))
    assert summary["memory"] == {"events": 0, "devices": {}}
    assert "GPU memory events (profile_memory)" in render_table(summary, width=200)  # the note, unwrapped


def test_table_and_diff_show_the_peak():
    a, b = (summarize(load_profile([str(trace(r))])) for r in WITH_TOTALS[1:])
    text = render_table(a)
    assert "== GPU memory (MiB" in text and "== Largest GPU allocations" in text
    d = diff(a, b)
    peak = d["memory"]["0"]["peak_allocated_bytes"]
    assert peak["base"] == a["memory"]["devices"]["0"]["peak"]["allocated_bytes"]
    assert peak["delta"] == b["memory"]["devices"]["0"]["peak"]["allocated_bytes"] - peak["base"]
