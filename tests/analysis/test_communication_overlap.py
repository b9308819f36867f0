"""The communication section (``analysis.communication``) against HTA 0.5.0, a recount from the raw
trace JSON and hand-built batches.

- HTA: ``get_comm_comp_overlap`` on every repository trace with NCCL kernels, our events given HTA's
  view first (``test_hta_agreement.hta_view``: µs-rounded times, last ProfilerStep dropped). HTA
  returns ``round(100 * ratio, 2)``, so agreement is within 0.005 points (before that rounding the
  two figures are the same float on every trace).
- Recount: the trace's own JSON (gzip + json, times in exact decimal ns as the loader reads them),
  kernels of cat ``kernel``, communication = name starting with ``nccl``, figures by a plain
  pure-Python sweep over the interval end points (``sweep``).
- Hand-built batches (``EventBatch.from_columns``) for the edge cases, and random ones against
  ``sweep``.
"""

from __future__ import annotations

import functools
import gzip
import json
import logging
import math
import random
import warnings
from collections import defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import trace
from cuda_tracer.loading import load_profile
from cuda_tracer.model.events import EventBatch, Kind
from otel_profiler.analysis.communication import (collective_type, communication, extra_collective_type,
                                                  merge_ranks)
from test_hta_agreement import hta_view

COMM_TRACES = ["hta/nccl_parser_config/nccl_data.json.gz", "hta/trace_filter/sampled_rank-0.json.gz",
               "hta/trace_filter/sampled_rank-1.json.gz", "hta/negative_queue_length_values_check/rank0.json.gz",
               "hta/trace_diff/control/control.json.gz", "hta/df_index_resolver/df_index_resolver.json.gz",
               "tracelens/b200/eager_trace.json.gz"]
NO_COMM_KERNEL_TRACE = "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
HTA_ROUNDING = 0.005  # HTA rounds its percentage to 2 decimals


@functools.lru_cache(maxsize=None)
def hta_overlap_pct(*paths: str) -> tuple[float, ...]:
    """HTA 0.5.0's overlap percentage of each file, the i-th as rank i; NaN without communication."""
    logging.getLogger("hta").setLevel(logging.CRITICAL)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from hta.trace_analysis import TraceAnalysis

        analysis = TraceAnalysis(trace_files=dict(enumerate(paths)), trace_dir="/")
        frame = analysis.get_comm_comp_overlap(visualize=False).sort_values("rank")
    return tuple(float(v) for v in frame["comp_comm_overlap_pctg"])


def ours_in_hta_view(batch: EventBatch) -> dict[str, Any]:
    return communication(hta_view(batch)[0])


# ------------------------------------------------------------------ the plain reference


def sweep(comm: list[tuple[int, int]], comp: list[tuple[int, int]],
          windows: list[tuple[int, int]]) -> tuple[int, int, list[int], list[int]]:
    """Communication time, its part with some computation running, and both inside each window:
    walk the sorted end points keeping how many kernels of each class are running."""
    change: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for which, intervals in ((0, comm), (1, comp)):
        for start, end in intervals:
            if end > start:
                change[start][which] += 1
                change[end][which] -= 1
    points = sorted(set(change) | {t for w in windows for t in w})
    running = [0, 0]
    total = hidden = 0
    in_total, in_hidden = [0] * len(windows), [0] * len(windows)
    for here, after in zip(points, points[1:]):
        running[0] += change[here][0] if here in change else 0
        running[1] += change[here][1] if here in change else 0
        if running[0] > 0:
            length = after - here
            total += length
            hidden += length if running[1] > 0 else 0
            for i, (lo, hi) in enumerate(windows):
                if lo <= here and after <= hi:
                    in_total[i] += length
                    in_hidden[i] += length if running[1] > 0 else 0
    return total, hidden, in_total, in_hidden


def expected_section(kernels: list[dict[str, Any]], steps: list[tuple[int, int, int]]) -> dict[str, Any]:
    """The section by ``sweep``, per device, from plain kernel records {name, start, end, device,
    stream, collective}; communication = name starting with nccl."""
    windows = [(lo, hi) for _, lo, hi in steps]
    total = hidden = 0
    step_total, step_hidden = [0] * len(steps), [0] * len(steps)
    groups: dict[tuple[str, int, int], list[tuple[int, int]]] = defaultdict(list)
    for device in sorted({k["device"] for k in kernels}):
        comm = [(k["start"], k["end"]) for k in kernels if k["device"] == device and k["name"].startswith("nccl")]
        comp = [(k["start"], k["end"]) for k in kernels if k["device"] == device and not k["name"].startswith("nccl")]
        t, h, st, sh = sweep(comm, comp, windows)
        total, hidden = total + t, hidden + h
        step_total = [a + b for a, b in zip(step_total, st)]
        step_hidden = [a + b for a, b in zip(step_hidden, sh)]
        for k in kernels:
            if k["device"] == device and k["name"].startswith("nccl"):
                groups[(k["collective"], device, k["stream"])].append((k["start"], k["end"]))
    by_collective = {}
    for (collective, device, stream), members in groups.items():
        comp = [(k["start"], k["end"]) for k in kernels if k["device"] == device and not k["name"].startswith("nccl")]
        t, h, _, _ = sweep(members, comp, [])
        by_collective[(collective, device, stream)] = {"kernels": len(members), **figures(t, h)}
    by_step = [{"step": n, "step_us": (hi - lo) / 1e3, **figures(t, h),
                "exposed_pct_of_step": 100.0 * (t - h) / (hi - lo) if hi > lo else None}
               for (n, lo, hi), t, h in zip(steps, step_total, step_hidden)]
    return {**figures(total, hidden), "kernels": sum(len(m) for m in groups.values()),
            "by_collective": by_collective, "by_step": by_step}


def figures(total_ns: int, hidden_ns: int) -> dict[str, Any]:
    return {"total_us": total_ns / 1e3, "exposed_us": (total_ns - hidden_ns) / 1e3,
            "overlap_pct": 100.0 * hidden_ns / total_ns if total_ns else None}


def assert_matches(ours: dict[str, Any], expected: dict[str, Any]) -> None:
    for key in ("total_us", "exposed_us", "overlap_pct", "kernels"):
        assert ours[key] == pytest.approx(expected[key], abs=1e-9), key
    got = {(g["collective"], g["device"], g["stream"]): {k: v for k, v in g.items()
                                                          if k not in ("collective", "device", "stream")}
           for g in ours["by_collective"]}
    assert got.keys() == expected["by_collective"].keys()
    for key, row in expected["by_collective"].items():
        assert got[key] == pytest.approx(row, abs=1e-9), key
    exposed = [g["exposed_us"] for g in ours["by_collective"]]
    assert exposed == sorted(exposed, reverse=True)
    assert len(ours["by_step"]) == len(expected["by_step"])
    for got_step, want in zip(ours["by_step"], expected["by_step"]):
        assert got_step == pytest.approx(want, abs=1e-9)


# ------------------------------------------------------------------ against HTA


@pytest.mark.parametrize("relative", COMM_TRACES)
def test_overlap_agrees_with_hta(relative):
    path = str(trace(relative))
    ours = ours_in_hta_view(load_profile([path]).ranks[0].batch)
    assert ours["kernels"] > 0
    (reference,) = hta_overlap_pct(path)
    assert ours["overlap_pct"] == pytest.approx(reference, abs=HTA_ROUNDING + 1e-9)


def test_no_communication_kernel_is_none_where_hta_divides_by_zero():
    """This trace names NCCL calls on the CPU (``nccl:...`` annotations) but ran no NCCL kernel."""
    path = trace(NO_COMM_KERNEL_TRACE)
    events = raw_events(path)
    assert any(str(e.get("name", "")).startswith("nccl") for e in events)
    assert not [e for e in events if e.get("cat") == "kernel" and str(e.get("name", "")).startswith("nccl")]
    assert communication(load_profile([str(path)]).ranks[0].batch)["overlap_pct"] is None
    assert math.isnan(hta_overlap_pct(str(path))[0])


def test_two_rank_profile_merged_agrees_with_hta_per_rank():
    paths = tuple(str(trace(f"hta/trace_filter/sampled_rank-{i}.json.gz")) for i in (0, 1))
    profile = load_profile(list(paths))
    sections = {str(r.rank): ours_in_hta_view(r.batch) for r in profile.ranks}
    merged = merge_ranks(sections)
    reference = hta_overlap_pct(*paths)
    assert [r["rank"] for r in merged["by_rank"]] == [0, 1]
    for row, want in zip(merged["by_rank"], reference):
        assert row["overlap_pct"] == pytest.approx(want, abs=HTA_ROUNDING + 1e-9)
    total = sum(s["total_us"] for s in sections.values())
    exposed = sum(s["exposed_us"] for s in sections.values())
    assert merged["total_us"] == pytest.approx(total)
    assert merged["exposed_us"] == pytest.approx(exposed)
    assert merged["overlap_pct"] == pytest.approx(100 * (total - exposed) / total)
    assert merged["kernels"] == sum(s["kernels"] for s in sections.values())
    assert len(merged["by_step"]) == sum(len(s["by_step"]) for s in sections.values())
    assert {row["rank"] for row in merged["by_collective"]} == {0, 1}


# ------------------------------------------------------------------ against the raw JSON


def raw_events(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as f:
        data = json.load(f, parse_float=Decimal)
    return data["traceEvents"] if isinstance(data, dict) else data


def ns(value: Any) -> int:
    return int(Decimal(value) * 1000)  # µs text to ns, finer digits cut as the loader does


@pytest.mark.parametrize("relative", ["hta/nccl_parser_config/nccl_data.json.gz",
                                      "hta/negative_queue_length_values_check/rank0.json.gz",
                                      "hta/trace_diff/control/control.json.gz"])
def test_steps_and_collectives_agree_with_a_recount_of_the_raw_json(relative):
    events = raw_events(trace(relative))
    kernels = [{"name": e["name"], "start": ns(e["ts"]), "end": ns(e["ts"]) + ns(e["dur"]),
                "device": e["args"]["device"], "stream": e["args"]["stream"],
                "collective": e["name"].split("_")[1] if e["name"].startswith("nccl") else None}
               for e in events if e.get("cat") == "kernel" and e.get("ph") == "X"]
    steps = sorted(((int(e["name"].split("#")[1]), ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]))
                    for e in events if e.get("ph") == "X" and e.get("cat") in ("user_annotation", "cpu_op")
                    and str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda s: s[1])
    assert steps and any(k["collective"] for k in kernels)
    ours = communication(load_profile([str(trace(relative))]).ranks[0].batch)
    assert_matches(ours, expected_section(kernels, steps))


# ------------------------------------------------------------------ hand-built batches

US = 1000


def batch_of(kernels: list[tuple], steps: list[tuple[int, int, int]] | None = None,
             collectives: dict[int, str] | None = None) -> EventBatch:
    """Kernels as (name, start_ns, end_ns, device, stream[, kind]); steps as STEP rows with their
    number; ``collectives``: kernel index -> its ``collective`` extra."""
    steps = steps or []
    strings = sorted({k[0] for k in kernels} | {"ProfilerStep", "step", "collective"})
    rows = [(k[5] if len(k) > 5 else Kind.KERNEL, k[0], k[1], k[2], k[3], k[4]) for k in kernels]
    rows += [(Kind.STEP, "ProfilerStep", lo, hi, -1, -1) for _, lo, hi in steps]
    base = EventBatch.from_columns(strings, kind=[r[0] for r in rows], name=[strings.index(r[1]) for r in rows],
                                   start_ns=[r[2] for r in rows], end_ns=[r[3] for r in rows],
                                   device=[r[4] for r in rows], stream=[r[5] for r in rows],
                                   rank=[0] * len(rows))
    extra = [(len(kernels) + i, "step", n) for i, (n, _, _) in enumerate(steps)]
    extra += [(i, "collective", v) for i, v in (collectives or {}).items()]
    return EventBatch(base.columns, strings, np.array([e[0] for e in extra], np.int64),
                      np.array([strings.index(e[1]) for e in extra], np.int32), [e[2] for e in extra])


def records(kernels: list[tuple]) -> list[dict[str, Any]]:
    return [{"name": k[0], "start": k[1], "end": k[2], "device": k[3], "stream": k[4],
             "collective": collective_type(k[0]) if k[0].startswith("nccl") else None}
            for k in kernels if len(k) < 6 or k[5] == Kind.KERNEL]


ALL_REDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
ALL_GATHER = "ncclKernel_AllGather_RING_LL_Sum_int8_t"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32"


def test_no_communication_gives_the_empty_section():
    batch = batch_of([(GEMM, 0, 10 * US, 0, 7), ("Memcpy DtoD", 0, 5 * US, 0, 8, Kind.MEMCPY)],
                     [(1, 0, 20 * US)])
    assert communication(batch) == {"total_us": 0.0, "exposed_us": 0.0, "overlap_pct": None, "kernels": 0,
                                    "by_collective": [], "by_step": []}
    assert merge_ranks({})["by_rank"] == []


def test_fully_hidden():
    start, end = 10 * US, 20 * US
    s = communication(batch_of([(ALL_REDUCE, start, end, 0, 20), (GEMM, start - US, end + US, 0, 7)]))
    assert s["total_us"] == (end - start) / 1e3
    assert s["exposed_us"] == 0.0
    assert s["overlap_pct"] == 100.0


def test_fully_exposed_and_copies_hide_nothing():
    start, end = 10 * US, 20 * US
    kernels = [(ALL_REDUCE, start, end, 0, 20), (GEMM, 0, start, 0, 7), (GEMM, end, end + US, 0, 7),
               ("Memcpy DtoH", start, end, 0, 7, Kind.MEMCPY), ("Memset", start, end, 0, 7, Kind.MEMSET)]
    s = communication(batch_of(kernels))
    assert s["exposed_us"] == s["total_us"] == (end - start) / 1e3
    assert s["overlap_pct"] == 0.0


def test_two_devices_summed_and_not_hidden_by_the_other_device():
    kernels = [(ALL_REDUCE, 0, 10 * US, 0, 20), (GEMM, 5 * US, 30 * US, 0, 7),  # half hidden on device 0
               (ALL_REDUCE, 0, 10 * US, 1, 20), (GEMM, 40 * US, 50 * US, 1, 7)]  # device 0's GEMM hides nothing here
    s = communication(batch_of(kernels))
    assert s["total_us"] == 2 * 10 * US / 1e3
    assert s["exposed_us"] == (5 * US + 10 * US) / 1e3
    assert {(g["device"], g["exposed_us"]) for g in s["by_collective"]} == {(0, 5 * US / 1e3), (1, 10 * US / 1e3)}
    assert_matches(s, expected_section(records(kernels), []))


def test_interval_spanning_a_step_boundary_is_cut():
    boundary = 10 * US
    steps = [(7, 0, boundary), (8, boundary, 3 * boundary)]
    kernels = [(ALL_REDUCE, boundary - 2 * US, boundary + 6 * US, 0, 20), (GEMM, boundary, boundary + US, 0, 7)]
    s = communication(batch_of(kernels, steps))
    first, second = s["by_step"]
    assert (first["step"], second["step"]) == (7, 8)
    assert first["total_us"] == first["exposed_us"] == 2 * US / 1e3
    assert second["total_us"] == 6 * US / 1e3 and second["exposed_us"] == 5 * US / 1e3
    assert first["exposed_pct_of_step"] == 100.0 * 2 * US / boundary
    assert_matches(s, expected_section(records(kernels), steps))
    given = communication(batch_of(kernels), steps=[(1, 0, boundary + US)])  # steps given, not from the batch
    assert given["by_step"][0]["step"] == 1 and given["by_step"][0]["total_us"] == 3 * US / 1e3


def test_overlapping_communication_on_two_streams_counts_once():
    kernels = [(ALL_REDUCE, 0, 10 * US, 0, 20), (ALL_GATHER, 5 * US, 15 * US, 0, 21), (GEMM, 12 * US, 20 * US, 0, 7)]
    s = communication(batch_of(kernels))
    assert s["kernels"] == 2
    assert s["total_us"] == 15 * US / 1e3  # not 20
    assert s["exposed_us"] == 12 * US / 1e3
    assert sorted(g["collective"] for g in s["by_collective"]) == ["AllGather", "AllReduce"]
    assert_matches(s, expected_section(records(kernels), []))


def test_collective_types():
    assert collective_type(ALL_REDUCE) == "AllReduce"
    assert collective_type(ALL_GATHER) == "AllGather"
    assert collective_type("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*)") == "SendRecv"
    assert collective_type("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL") == "ReduceScatter"
    assert collective_type("ncclKernel_Broadcast_RING_LL_Sum_int8_t") == "Broadcast"
    assert collective_type("ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)") == "Generic"
    assert [extra_collective_type(v) for v in ("allreduce", "_allgather_base", "reduce_scatter_tensor_coalesced",
                                               "broadcast", "all_to_all", "mystery")] == \
        ["AllReduce", "AllGather", "ReduceScatter", "Broadcast", "AllToAll", "mystery"]
    batch = batch_of([(ALL_REDUCE, 0, US, 0, 20), (ALL_REDUCE, 2 * US, 3 * US, 0, 20)], collectives={1: "broadcast"})
    assert sorted(g["collective"] for g in communication(batch)["by_collective"]) == ["AllReduce", "Broadcast"]


@pytest.mark.parametrize("seed", range(200))
def test_random_batches_agree_with_the_plain_sweep(seed):
    rng = random.Random(seed)
    names = [ALL_REDUCE, ALL_GATHER, GEMM, "triton_poi_fused_add_0"]
    kernels: list[tuple] = []
    for _ in range(rng.randint(1, 30)):
        start = rng.randint(0, 100) * US // rng.choice((1, 7))
        end = start + rng.randint(0, 20) * US
        kind = rng.choice((Kind.KERNEL,) * 5 + (Kind.MEMCPY,))
        kernels.append((rng.choice(names), start, end, rng.randint(0, 1), rng.randint(7, 9), kind))
    edges = sorted(rng.sample(range(0, 130 * US, US), 4))
    steps = [(i, edges[i], edges[i + 1]) for i in range(0, 3, 2 if seed % 2 else 1)]
    ours = communication(batch_of(kernels, steps))
    expected = expected_section(records(kernels), steps)
    if expected["kernels"] == 0:
        assert ours["kernels"] == 0 and ours["overlap_pct"] is None and ours["by_step"] == []
    else:
        assert_matches(ours, expected)
