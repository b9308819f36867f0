"""Profile-derived metrics of a shared GPU trace equal the summary's numbers for that trace."""

from __future__ import annotations

import pytest

from cuda_tracer.loading import load_profile
from otel_profiler.metrics import points as m
from otel_profiler.analysis.summary import summarize, summarize_batch
from otel_profiler.metrics.profile import ProfileMetrics, step_trace_hex
from otel_profiler.spans.build import build_spans

from conftest import trace

TRACES = ["hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",  # HtoD, syncs
          "hta/nccl_parser_config/nccl_data.json.gz"]  # NCCL kernels, DtoD, steps


def _by(points, spec, key=None):
    return {(p.attributes.get(key) if key else None): p.value for p in points if p.spec is spec}


@pytest.mark.parametrize("relative", TRACES)
def test_metrics_equal_summary(relative: str) -> None:
    rank = load_profile([str(trace(relative))]).ranks[0]
    batch, summary = rank.batch, summarize_batch(rank.batch)
    metrics = ProfileMetrics(run_id="run-x")
    metrics.observe(batch, rank.meta)
    points = metrics.points()

    (device, d), = summary["devices"].items()
    assert _by(points, m.GPU_BUSY)[None] == pytest.approx(d["busy_us"] / d["span_us"], rel=1e-12)
    assert _by(points, m.GPU_BUSY_TIME)[None] == pytest.approx(d["busy_us"] / 1e6, rel=1e-12)
    assert _by(points, m.GPU_SPAN_TIME)[None] == pytest.approx(d["span_us"] / 1e6, rel=1e-12)
    assert {p.attributes["gpu.device.id"] for p in points if p.spec is m.GPU_BUSY} == {int(device)}

    kernel = _by(points, m.KERNEL_TIME, "gpu.kernel.class")
    assert kernel == pytest.approx({k: v / 1e6 for k, v in summary["kernels"]["by_class"].items()}, rel=1e-12)

    copied = _by(points, m.MEMCPY_BYTES, "gpu.memcpy.kind")
    expected = {k: v["bytes"] for k, v in summary["memcpy"].items() if v["count"]}
    assert copied == expected and expected
    throughput = _by(points, m.MEMCPY_THROUGHPUT, "gpu.memcpy.kind")
    assert throughput == pytest.approx({k: summary["memcpy"][k]["throughput_gbps"] * 1e9 for k in expected})
    copy_time = _by(points, m.MEMCPY_TIME, "gpu.memcpy.kind")
    assert copy_time == pytest.approx({k: summary["memcpy"][k]["total_us"] / 1e6 for k in expected})

    sync = _by(points, m.SYNC_TIME, "gpu.sync.kind")
    assert sync == pytest.approx({k: v["total_us"] / 1e6 for k, v in summary["sync"]["by_kind"].items()})

    for spec, key in ((m.LAUNCH_DELAY, "delay_us"), (m.LAUNCH_LATENCY, "latency_us")):
        h = _by(points, spec)[None]
        stats = summary["launch"][key]
        assert h.count == stats["count"] == summary["launch"]["matched_gpu_ops"]
        assert h.total == pytest.approx(stats["mean"] * stats["count"] / 1e6, rel=1e-9)
        assert max(b for b, c in zip(list(spec.buckets) + [float("inf")], h.counts) if c) >= stats["max"] / 1e6

    depth = {(p.attributes["gpu.device.id"], p.attributes["gpu.stream.id"]): p.value
             for p in points if p.spec is m.QUEUE_DEPTH}
    assert depth == {(s["device"], s["stream"]): s["max_queue_depth"] for s in summary["streams"]}

    events = _by(points, m.EVENTS, "otel_profiler.kind")
    assert events == summary["events"]

    steps = summary["steps"]
    if steps["count"]:
        h = _by(points, m.STEP_DURATION)[None]
        assert h.count == steps["count"]
        assert h.total == pytest.approx(sum(s["duration_us"] for s in steps["items"]) / 1e6)
        # Exemplars carry the trace ids of the exported train.step spans of those steps.
        ids = {e[0] for e in h.exemplars if e is not None}
        expected_ids = {step_trace_hex("run-x", 0, s["step"]) for s in steps["items"]}
        assert ids and ids <= expected_ids


def test_exemplar_ids_are_the_exported_step_trace_ids() -> None:
    rank = load_profile([str(trace(TRACES[1]))]).ranks[0]
    metrics = ProfileMetrics()  # no configured run id: the metadata's, as the exporter does
    metrics.observe(rank.batch, rank.meta)
    h = _by(metrics.points(), m.STEP_DURATION)[None]
    table = build_spans(rank.meta, rank.batch)
    roots = {table.trace_hex(i) for i in range(len(table)) if table.names[table.name[i]] == "train.step"}
    ids = {e[0] for e in h.exemplars if e is not None}
    assert ids and ids <= roots


def test_counters_accumulate_and_gauges_follow_the_latest_batch() -> None:
    rank = load_profile([str(trace(TRACES[0]))]).ranks[0]
    metrics = ProfileMetrics(run_id="r")
    half = len(rank.batch) // 2
    order = rank.batch.start_ns.argsort()
    first, second = rank.batch.take(order[:half]), rank.batch.take(order[half:])
    metrics.observe(first)
    metrics.observe(second, {"cupti_dropped_records": 7})
    points = metrics.points()
    both = summarize_batch(first)["kernels"]["by_class"], summarize_batch(second)["kernels"]["by_class"]
    kernel = _by(points, m.KERNEL_TIME, "gpu.kernel.class")
    assert kernel == pytest.approx({k: (both[0][k] + both[1][k]) / 1e6 for k in kernel})
    (d,) = summarize_batch(second)["devices"].values()
    assert _by(points, m.GPU_BUSY)[None] == pytest.approx(d["busy_us"] / d["span_us"])
    assert _by(points, m.DROPPED, "otel_profiler.reason") == {"cupti_dropped_records": 7}


@pytest.mark.parametrize("relative", ["tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
                                      "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"])
def test_memory_peak_gauges_equal_a_recount(relative: str) -> None:
    """The peak gauges hold the largest Total Allocated / Total Reserved of the GPU [memory] events
    inside the last ProfilerStep, recounted from the raw trace JSON."""
    import gzip
    import json
    path = trace(relative)
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    steps = [e for e in events if e.get("ph") == "X" and str(e.get("name")).startswith("ProfilerStep#")]
    last = max(steps, key=lambda e: e["ts"])
    inside = [e["args"] for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type") != 0
              and last["ts"] <= e["ts"] <= last["ts"] + last["dur"]]
    assert inside
    rank = load_profile([str(path)]).ranks[0]
    metrics = ProfileMetrics(run_id="run-x")
    metrics.observe(rank.batch, rank.meta)
    points = metrics.points()
    device = {a["Device Id"] for a in inside}.pop()
    assert _by(points, m.GPU_MEMORY_PEAK_ALLOCATED, "gpu.device.id") == {device: max(a["Total Allocated"] for a in inside)}
    assert _by(points, m.GPU_MEMORY_PEAK_RESERVED, "gpu.device.id") == {device: max(a["Total Reserved"] for a in inside)}


def test_no_memory_gauges_without_memory_totals() -> None:
    rank = load_profile([str(trace(TRACES[0]))]).ranks[0]
    metrics = ProfileMetrics(run_id="run-x")
    metrics.observe(rank.batch, rank.meta)
    assert not [p for p in metrics.points() if p.spec in (m.GPU_MEMORY_PEAK_ALLOCATED, m.GPU_MEMORY_PEAK_RESERVED)]


@pytest.mark.parametrize("expected_rank,kept", [(0, {0}), (5, {0})])
def test_the_step_series_starts_at_zero_and_yields_to_the_rank_learned_later(expected_rank, kept) -> None:
    """``expect_steps``: the rank's step histogram exists at zero before any step; when the steps
    come under another rank (learned after start), the empty expected series goes."""
    rank = load_profile([str(trace(TRACES[1]))]).ranks[0]
    metrics = ProfileMetrics()
    metrics.expect_steps(expected_rank)
    (zero,) = [p for p in metrics.points() if p.spec is m.STEP_DURATION]
    assert zero.attributes == {"otel_profiler.rank": expected_rank} and sum(zero.value.counts) == 0
    metrics.observe(rank.batch, {**rank.meta, "rank": 0})
    series = {p.attributes["otel_profiler.rank"]: p.value for p in metrics.points() if p.spec is m.STEP_DURATION}
    assert set(series) == kept and sum(series[0].counts) > 0


@pytest.mark.parametrize("relative", ["tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
                                      "hta/trace_diff/control/control.json.gz"])
def test_flops_and_step_mfu_equal_the_summarys(relative: str) -> None:
    rank = load_profile([str(trace(relative))]).ranks[0]
    flops = summarize(load_profile([str(trace(relative))]))["flops"]
    metrics = ProfileMetrics(run_id="run-x")
    metrics.observe(rank.batch, rank.meta)
    points = metrics.points()
    by_class = _by(points, m.FLOPS, "otel_profiler.op.class")
    assert by_class == pytest.approx({k: c["flops"] for k, c in flops["by_class"].items() if c["flops"]}, rel=1e-12)
    assert by_class["gemm"] > 0
    latest = [s for s in flops["by_step"] if s["flops"] and s["mfu"] is not None][-1]
    assert _by(points, m.STEP_MFU)[None] == pytest.approx(latest["mfu"], rel=1e-12)
    assert 0 < latest["mfu"] < 1
