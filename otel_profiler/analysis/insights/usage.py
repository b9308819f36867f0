"""Insight rules on how busy the GPUs are and what holds them back: utilization, host wait, step
outliers, load balance, stragglers, memory growth, batch size, the data loader."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cuda_tracer.model.array_sets import distinct
from cuda_tracer.model.events import MISSING
from cuda_tracer.profile import Profile

from ..summary_schema import Insight
from .context import CUDA_DEVICE_TYPE, Context, device_label, insight, step_label
from .thresholds import threshold


@dataclass(frozen=True)
class UsageThresholds:
    """The thresholds of the rules on how busy the GPUs are; ``threshold`` keeps each one's help and unit."""

    gpu_util_low_pct: float = threshold(
        70.0, "%", "low_gpu_utilization: a device busy less than this % of its span is underutilized "
        "(SageMaker p95 70).")
    host_wait_pct: float = threshold(
        20.0, "%", "cpu_bottleneck: GPU idle waiting for the CPU (host wait) for at least this % of the "
        "device span.")
    step_outlier_mads: float = threshold(
        3.0, "scaled MADs", "step_outliers: a step slower than median + this many scaled MADs (robust sigmas)"
        " is an outlier.")
    step_outlier_min_excess_pct: float = threshold(
        20.0, "%", "step_outliers: ... and at least this % slower than the median step, ...")
    step_outlier_min_excess_ms: float = threshold(
        5.0, "ms", "step_outliers: ... and at least this many ms slower (jitter of a few ms, as under DDP, is"
        " no finding).")
    min_steps: int = threshold(
        3, "steps", "step_outliers: fewer steps than this say nothing about outliers.")
    warmup_steps: int = threshold(
        1, "steps", "step_outliers: a rank's first this many steps are warm-up (named so; when only they, or "
        "the steps where a profiler window starts or stops, are slow: low severity).")
    load_imbalance_points: float = threshold(
        20.0, "% points", "load_balancing: utilization of the most and least busy GPU this many % points "
        "apart.")
    straggler_pct: float = threshold(
        5.0, "%", "straggler_ranks: a rank whose median step is this % above the median of all ranks.")
    memory_growth_pct_points: float = threshold(
        10.0, "% points", "gpu_memory_growth: allocated memory rising by this many points of device memory "
        "(SageMaker 10).")
    memory_window_fraction: float = threshold(
        0.1, "fraction", "gpu_memory_growth: first and last fraction of memory samples averaged "
        "(moving-average window).")
    batch_gpu_util_pct: float = threshold(
        70.0, "%", "batch_size_too_small: GPU busy below this %, ... (SageMaker BatchSize 70).")
    batch_memory_pct: float = threshold(
        70.0, "%", "batch_size_too_small: ... and peak allocated GPU memory below this % of device memory.")
    dataloader_pct: float = threshold(
        10.0, "%", "dataloader: time in DataLoader ``__next__`` at least this % of step (or profile) time.")


def low_gpu_utilization(ctx: Context) -> list[Insight]:
    """GPU busy (merged GPU-op time) below ``gpu_util_low_pct`` % of the device's span."""
    out = []
    for key, d in ctx.summary["devices"].items():
        util = 100.0 - d["idle_pct"]
        if d["span_us"] > 0 and util < ctx.th.gpu_util_low_pct:
            out.append(insight(
                "low_gpu_utilization", "high" if util < ctx.th.gpu_util_low_pct / 2 else "medium",
                device_label(key), "Low GPU utilization",
                f"The GPU was busy {util:.1f}% of its {d['span_us'] / 1e3:,.1f} ms span "
                f"(idle {d['idle_us'] / 1e3:,.1f} ms; threshold {ctx.th.gpu_util_low_pct:g}%).",
                "Find what the GPU waits for in the timeline's idle gaps: minimize blocking calls "
                "(syncs, .item()), overlap data loading with compute, increase the batch size, or "
                "change the distributed strategy.",
                util_pct=util, idle_us=d["idle_us"], span_us=d["span_us"]))
    return out


def cpu_bottleneck(ctx: Context) -> list[Insight]:
    """GPU idle time attributable to waiting for the CPU ≥ ``host_wait_pct`` % of the device span.

    Per device: idle time × (host-wait share of all stream gaps), where a gap is host wait when the
    next op's launch call began after the previous op ended (HTA idle breakdown). Needs CPU-side
    launch calls in the trace; without them no gap is host wait and the rule stays silent.
    """
    out = []
    gaps: dict[tuple[int, int], list[float]] = {}
    for s in ctx.summary["streams"]:
        g = gaps.setdefault((s["rank"], s["device"]), [0.0, 0.0])
        g[0] += s["host_wait_us"]
        g[1] += s["host_wait_us"] + s["kernel_wait_us"] + s["other_us"]
    multi = "ranks" in ctx.summary
    for (rank, device), (host, total) in gaps.items():
        key = f"{rank}:{device}" if multi else str(device)
        d = ctx.summary["devices"].get(key)
        if not d or not d["span_us"] or not total:
            continue
        wait = d["idle_us"] * host / total
        pct = 100.0 * wait / d["span_us"]
        if pct >= ctx.th.host_wait_pct:
            out.append(insight(
                "cpu_bottleneck", "high", device_label(key), "CPU bottleneck: the GPU waits for the host",
                f"The GPU sat idle about {wait / 1e3:,.1f} ms waiting for the CPU to launch the next op "
                f"({pct:.1f}% of the {d['span_us'] / 1e3:,.1f} ms device span; {100 * host / total:.0f}% "
                f"of stream gaps are host waits; threshold {ctx.th.host_wait_pct:g}%).",
                "Move CPU work off the training loop: more DataLoader workers (num_workers) with "
                "prefetching, fewer Python-side operations per step, CUDA graphs or torch.compile "
                "to cut launch overhead.",
                host_wait_us=wait, host_wait_pct=pct))
    return out


def step_outliers(ctx: Context) -> list[Insight]:
    """Steps slower than median + ``step_outlier_mads`` scaled MADs, and by at least
    ``step_outlier_min_excess_pct`` % of the median and ``step_outlier_min_excess_ms`` ms (both
    floors: jitter of a few ms, as under DDP, is no finding). The first ``warmup_steps`` of a rank
    are named warm-up; when only they are slow the finding is low severity."""
    b, th, out = ctx.batch, ctx.th, []
    for rank in distinct(b.rank[ctx.step_rows]).tolist():
        rows = ctx.step_rows[b.rank[ctx.step_rows] == rank]
        if len(rows) < th.min_steps:
            continue
        d = (b.end_ns[rows] - b.start_ns[rows]).astype(np.float64) / 1e3
        med = float(np.median(d))
        mad = 1.4826 * float(np.median(np.abs(d - med)))
        limit = max(med + th.step_outlier_mads * mad, med * (1 + th.step_outlier_min_excess_pct / 100),
                    med + th.step_outlier_min_excess_ms * 1e3)
        slow = np.flatnonzero(d > limit)
        if not len(slow):
            continue
        warm = slow < th.warmup_steps
        edges = _window_edges(ctx.profile, rank)
        numbers = b.extra("step")
        why = ["warm-up" if w else edges.get(numbers.get(int(r), -1), "")
               for w, r in zip(warm.tolist(), rows[slow].tolist())]
        names = [step_label(n) + (f" ({w})" if w else "") for n, w in zip(b.names(rows[slow]), why)]
        only_warmup = all(why)
        out.append(insight(
            "step_outliers", "low" if only_warmup else "medium", f"rank {rank}",
            "Slow warm-up or profiler-window steps" if only_warmup else "Step-time outliers",
            f"{len(slow)} of {len(rows)} steps took longer than {limit / 1e3:,.2f} ms "
            f"(median {med / 1e3:,.2f} ms; an outlier is at least {th.step_outlier_min_excess_pct:g}% "
            f"and {th.step_outlier_min_excess_ms:g} ms slower): " +
            ", ".join(f"{n} {v / 1e3:,.2f} ms" for n, v in zip(names[:5], d[slow][:5])) + ".",
            "The first steps pay for one-off work (allocator warm-up, cuDNN autotuning, compilation, "
            "lazy imports), and the steps where a detailed profiler window starts or stops pay for "
            "the profiler: leave them out of measurements."
            if only_warmup else
            "Open the slow steps in the timeline and compare them with a median step: look for "
            "data-loading stalls, I/O, garbage collection, recompilation, checkpointing or other "
            "processes taking the CPU at the same time.",
            steps=names, durations_us=d[slow].tolist(), median_us=med, limit_us=limit,
            warmup_only=only_warmup))
    return out


def _window_edges(profile: Profile, rank: int) -> dict[int, str]:
    """Step number -> "profiler window start"/"profiler window stop": the steps of a live run where
    a detailed capture window began, and the step after it ended (they pay for the profiler)."""
    out: dict[int, str] = {}
    for r in profile.ranks:
        if r.rank != rank:
            continue
        for w in r.meta.get("windows") or []:
            if isinstance(w, dict) and w.get("captured"):
                if isinstance(w.get("first_step"), int):
                    out[w["first_step"]] = "profiler window start"
                if isinstance(w.get("last_step"), int):
                    out[w["last_step"] + 1] = "profiler window stop"
    return out


def load_balancing(ctx: Context) -> list[Insight]:
    """GPU utilization (busy % of span) of the most and least busy device ``load_imbalance_points`` apart.

    SageMaker's LoadBalancing compares per-GPU utilization histograms; with a trace we compare each
    device's utilization over its span, across the devices of one rank and across ranks.
    """
    devices = ctx.summary["devices"]
    if len(devices) < 2:
        return []
    util = {k: 100.0 - v["idle_pct"] for k, v in devices.items()}
    hi_key, lo_key = max(util, key=util.__getitem__), min(util, key=util.__getitem__)
    points = util[hi_key] - util[lo_key]
    if points < ctx.th.load_imbalance_points:
        return []
    return [insight(
        "load_balancing", "medium", "all devices", "Unbalanced work across GPUs",
        f"GPU utilization ranges from {util[lo_key]:.1f}% ({device_label(lo_key)}) to "
        f"{util[hi_key]:.1f}% ({device_label(hi_key)}): {points:.1f} points apart (threshold "
        f"{ctx.th.load_imbalance_points:g} points).",
        "Balance the work: shard data and model evenly, check for uneven sequence lengths or "
        "embedding tables, or choose a different distributed strategy.",
        util_pct=util, imbalance_points=points)]


def straggler_ranks(ctx: Context) -> list[Insight]:
    """Ranks whose median step time is ``straggler_pct`` % above the median over ranks."""
    b = ctx.batch
    ranks = distinct(b.rank[ctx.step_rows]).tolist()
    if len(ranks) < 2:
        return []
    med = {}
    for rank in ranks:
        rows = ctx.step_rows[b.rank[ctx.step_rows] == rank]
        med[rank] = float(np.median(b.end_ns[rows] - b.start_ns[rows])) / 1e3
    overall = float(np.median(list(med.values())))
    out = []
    for rank, m in med.items():
        pct = 100.0 * (m - overall) / overall if overall else 0.0
        if pct >= ctx.th.straggler_pct:
            out.append(insight(
                "straggler_ranks", "high", f"rank {rank}", "Straggler rank",
                f"Rank {rank}'s median step takes {m / 1e3:,.2f} ms, {pct:.1f}% above the median over "
                f"{len(ranks)} ranks ({overall / 1e3:,.2f} ms; threshold {ctx.th.straggler_pct:g}%); "
                f"every other rank waits for it in collectives.",
                "Check this rank's host (thermal throttling, noisy neighbours, slower storage or "
                "network) and its share of the data; compare its timeline with a fast rank's.",
                median_step_us=m, ranks_median_step_us=overall, slower_pct=pct))
    return out


def _device_memory(profile: Profile) -> dict[tuple[int, int], int]:
    """(rank, device) → total device memory in bytes, from the trace's device properties."""
    out = {}
    for r in profile.ranks:
        for d in r.meta.get("device_properties") or []:
            if isinstance(d, dict) and isinstance(d.get("totalGlobalMem"), int):
                out[(r.rank, int(d.get("id", -1)))] = d["totalGlobalMem"]
    return out


def _memory_samples(ctx: Context) -> dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]:
    """(rank, device) → (times, Total Allocated bytes) of CUDA [memory] events, in time order."""
    b = ctx.batch
    key_id = b.name_id("total_allocated")
    rows = distinct(b.extra_row[b.extra_key == key_id]) if key_id >= 0 else np.zeros(0, np.int64)
    alloc = b.extra_column("total_allocated", rows)
    keep = (b.extra_column("device_type", rows) == CUDA_DEVICE_TYPE) & (alloc != MISSING)
    rows, alloc = rows[keep], alloc[keep]
    out: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
    if not len(rows):
        return out
    order = np.argsort(b.start_ns[rows], kind="stable")
    rows, values = rows[order], alloc[order].astype(np.float64)
    for rank, device in set(zip(b.rank[rows].tolist(), b.device[rows].tolist())):
        sel = (b.rank[rows] == rank) & (b.device[rows] == device)
        out[(rank, device)] = (b.start_ns[rows[sel]], values[sel])
    return out


def gpu_memory_growth(ctx: Context) -> list[Insight]:
    """Moving average of allocated memory rising by ``memory_growth_pct_points`` of device memory."""
    totals, out = _device_memory(ctx.profile), []
    for (rank, device), (_, values) in ctx.once(_memory_samples).items():
        n = max(1, int(len(values) * ctx.th.memory_window_fraction))
        if len(values) < 2 * n:
            continue
        first, last = float(values[:n].mean()), float(values[-n:].mean())
        total = totals.get((rank, device)) or float(values.max())
        points = 100.0 * (last - first) / total
        if points >= ctx.th.memory_growth_pct_points:
            out.append(insight(
                "gpu_memory_growth", "medium", f"rank {rank} device {device}", "GPU memory keeps growing",
                f"Allocated memory rose from {first / 2**30:,.2f} GiB to {last / 2**30:,.2f} GiB "
                f"(moving averages over {n} samples), {points:.1f} points of the device's "
                f"{total / 2**30:,.1f} GiB (threshold {ctx.th.memory_growth_pct_points:g} points).",
                "Look for tensors kept alive across steps (losses accumulated with their graph, "
                "growing caches, lists of outputs); call .detach()/.item() on logged values. Choose a "
                "larger instance if close to the device's memory.",
                first_bytes=first, last_bytes=last, growth_points=points))
    return out


def batch_size_too_small(ctx: Context) -> list[Insight]:
    """GPU busy below ``batch_gpu_util_pct`` and peak memory below ``batch_memory_pct`` of the device."""
    totals, out = _device_memory(ctx.profile), []
    multi = "ranks" in ctx.summary
    for (rank, device), (_, values) in ctx.once(_memory_samples).items():
        total = totals.get((rank, device))
        d = ctx.summary["devices"].get(f"{rank}:{device}" if multi else str(device))
        if not total or not d:
            continue
        util, mem = 100.0 - d["idle_pct"], 100.0 * float(values.max()) / total
        if util < ctx.th.batch_gpu_util_pct and mem < ctx.th.batch_memory_pct:
            out.append(insight(
                "batch_size_too_small", "medium", f"rank {rank} device {device}",
                "Batch size may be too small",
                f"GPU busy {util:.1f}% (threshold {ctx.th.batch_gpu_util_pct:g}%) and peak allocated "
                f"memory {float(values.max()) / 2**30:,.2f} GiB = {mem:.1f}% of "
                f"{total / 2**30:,.1f} GiB (threshold {ctx.th.batch_memory_pct:g}%).",
                "Increase the batch size (scaling the learning rate), or run on a smaller, cheaper "
                "GPU instance.",
                util_pct=util, peak_memory_pct=mem))
    return out


def dataloader(ctx: Context) -> list[Insight]:
    """Time in DataLoader ``__next__`` ≥ ``dataloader_pct`` % of step (or profile) time.

    The calls are found by name whatever their kind: ``enumerate(DataLoader)#...__next__`` as an
    operator or a user annotation, or the Python function ``torch/utils/data/dataloader.py(N):
    __next__``; their union is the loading time."""
    load = ctx.loading()
    if load is None or load.pct < ctx.th.dataloader_pct:
        return []
    return [insight(
        "dataloader", "high", "profile", "Training waits for the data loader",
        f"{load.calls} DataLoader __next__ calls took {load.loading_ns / 1e6:,.1f} ms, {load.pct:.1f}% of "
        f"{load.of} time (threshold {ctx.th.dataloader_pct:g}%)"
        + ("; the loader runs in the training process (num_workers=0)." if load.single_process else
           "; the training loop waits for its workers: loading is on the critical path."),
        "Set DataLoader(num_workers=N, pin_memory=True, prefetch_factor=2+, persistent_workers=True) "
        "with N near the CPU cores per GPU; move decoding/augmentation to the workers or the GPU.",
        loading_us=load.loading_ns / 1e3, loading_pct=load.pct, single_process=load.single_process)]
