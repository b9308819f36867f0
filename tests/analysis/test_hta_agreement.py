"""Our temporal breakdown and launch delays against Holistic Trace Analysis 0.5.0, run in the same test.

HTA looks at a different slice of the trace than our own output does, so the comparison first gives
our events HTA's view (docs/hta-differences.md lists each difference and why):

- timestamps rounded as HTA's ``round_down_time_stamps`` does: start up to the next whole µs, end
  down to the previous one (sub-µs ops get a negative duration there, as in HTA);
- the last ProfilerStep dropped when the trace has two or more: CPU rows are kept when they start
  before the last ProfilerStep row that is not on a GPU stream, GPU rows when a kept CPU row has the
  same correlation id (so GPU ops without a launch call go too);
- "GPU" is every row with a stream argument, which includes ``cuda_sync`` rows; compute is a kernel
  whose name matches none of HTA's non-compute patterns (``Stream Wait Event`` counts as compute);
- launch statistics only over ``cudaLaunchKernel``, ``cudaLaunchKernelExC``, ``cudaMemcpyAsync`` and
  ``cudaMemsetAsync``.

Our numbers are then computed by our own code (``temporal_breakdown``, ``correlate``) on that view.
"""

from __future__ import annotations

import functools
import logging
import re
import warnings

import numpy as np
import pytest

from conftest import ALL_TRACES, trace
from cuda_tracer.model.correlate import correlate
from cuda_tracer.model.events import MISSING, EventBatch, Kind
from cuda_tracer.loading import load_profile
from otel_profiler.analysis.breakdown import temporal_breakdown
from otel_profiler.analysis.summary import summarize

HTA_LAUNCH_NAMES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemsetAsync")
HTA_NON_COMPUTE = re.compile(r"^nccl.*Kernel|^Memcpy|^Memset|^dma|Sync")


@functools.lru_cache(maxsize=None)
def hta(path: str) -> dict:
    """HTA 0.5.0's numbers for one trace file (as rank 0), µs; None where HTA raises."""
    logging.getLogger("hta").setLevel(logging.CRITICAL)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from hta.trace_analysis import TraceAnalysis

        analysis = TraceAnalysis(trace_files={0: path}, trace_dir="/")
        out = {}
        try:
            out["temporal"] = analysis.get_temporal_breakdown(visualize=False).iloc[0].to_dict()
        except (AssertionError, IndexError, ValueError):
            out["temporal"] = None
        stats = analysis.get_cuda_kernel_launch_stats(visualize=False)
        out["launch_delay"] = stats[0]["launch_delay"].to_numpy() if 0 in stats else np.array([])
    return out


def hta_view(batch: EventBatch) -> tuple[EventBatch, np.ndarray]:
    """Our batch as HTA sees it (µs-rounded, last step cut) plus its GPU rows."""
    start = -(-batch.start_ns // 1000)  # ceil
    end = batch.end_ns // 1000  # floor
    gpu = np.isin(batch.kind, [Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET])
    gpu |= (batch.kind == Kind.SYNC) & (batch.stream != MISSING)
    names = np.array(batch.strings, dtype=object)[batch.name]
    step = np.array(["ProfilerStep" in n for n in names])
    keep = np.ones(len(batch), bool)
    if len(set(names[step])) >= 2:
        cut = start[step & ~gpu].max()
        keep = ~gpu & (start < cut)
        kept_corr = batch.correlation[keep & (batch.correlation != MISSING)]
        keep |= gpu & np.isin(batch.correlation, kept_corr)
    view = batch.take(keep)
    view.columns["start_ns"] = start[keep] * 1000
    view.columns["end_ns"] = end[keep] * 1000
    return view, np.flatnonzero(gpu[keep])


def our_temporal(view: EventBatch, gpu_rows: np.ndarray) -> dict:
    names = view.names(gpu_rows)
    is_compute = np.array([view.kind[r] in (Kind.KERNEL, Kind.SYNC) and not HTA_NON_COMPUTE.search(n)
                           for r, n in zip(gpu_rows.tolist(), names)], dtype=bool)
    view.columns["device"][gpu_rows] = 0  # HTA merges every GPU row of the rank together
    (row,) = temporal_breakdown(view, gpu_rows, is_compute)
    return row


def our_launch_delays_us(view: EventBatch) -> np.ndarray:
    corr = correlate(view)
    matched = corr.matched
    launches = corr.launch_of_gpu[matched]
    allowed = np.isin(np.array(view.strings, dtype=object)[view.name[launches]], HTA_LAUNCH_NAMES)
    delays = corr.delay_ns[matched][allowed]
    return delays / 1000


GPU_TRACES = [p for p in ALL_TRACES if "cpu_only" not in str(p)]


@pytest.mark.parametrize("path", GPU_TRACES, ids=lambda p: p.name[:40])
def test_temporal_breakdown_and_launch_delay_agree_with_hta(path):
    reference = hta(str(path))
    batch = load_profile([str(path)]).ranks[0].batch
    view, gpu_rows = hta_view(batch)
    ours = our_temporal(view, gpu_rows)
    if reference["temporal"] is None:  # HTA fails on this file (Qwen: an assertion); we answer
        assert ours["span_us"] > 0
        assert summarize(load_profile([str(path)]))["devices"]
    else:
        assert ours["idle_pct"] == pytest.approx(reference["temporal"]["idle_time_pctg"], abs=0.5)
        assert ours["compute_pct"] == pytest.approx(reference["temporal"]["compute_time_pctg"], abs=0.5)
    delays = our_launch_delays_us(view)
    assert len(delays) == len(reference["launch_delay"])
    if len(delays):
        assert np.median(delays) == pytest.approx(np.median(reference["launch_delay"]), abs=1.0)


def test_our_own_output_keeps_what_hta_drops():
    """On negative_queue rank0 HTA drops 11% orphan GPU ops; our summary counts them, exactly."""
    path = trace("hta/negative_queue_length_values_check/rank0.json.gz")
    summary = summarize(load_profile([str(path)]))
    launch = summary["launch"]
    gpu_ops = summary["events"]["kernel"] + summary["events"]["memcpy"] + summary["events"]["memset"]
    assert launch["matched_gpu_ops"] + launch["orphan_gpu_ops"] == gpu_ops
    assert launch["orphan_gpu_ops"] > 0.05 * gpu_ops


def test_cpu_only_trace_has_no_gpu_breakdown_where_hta_raises():
    path = trace("hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    assert hta(str(path))["temporal"] is None
    assert summarize(load_profile([str(path)]))["devices"] == {}
