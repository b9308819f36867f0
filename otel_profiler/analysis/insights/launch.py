"""Insight rules on how work reaches the GPU: launch-bound kernels, syncs in steps, pageable copies,
communication overlap, deep stream queues."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cuda_tracer.model.events import Kind, MemcpyKind

from ..breakdown import COMMUNICATION, COMPUTE, KERNEL_CLASSES, classify, merged_length
from ..platform import blocking_call
from ..summary_schema import Insight, Summary
from .context import LAUNCH_API, SCALAR_READ_OPS, Context, device_label, insight
from .thresholds import threshold


@dataclass(frozen=True)
class LaunchThresholds:
    """The thresholds of the rules on how work reaches the GPU; ``threshold`` keeps each one's help and unit."""

    short_kernel_us: float = threshold(
        10.0, "µs", "launch_bound: kernels shorter than this are 'short'.")
    short_kernel_fraction: float = threshold(
        0.5, "fraction", "launch_bound: at least this fraction of kernels are short, ...")
    launch_bound_util_pct: float = threshold(
        70.0, "%", "launch_bound: ... the GPU is busy less than this %, and a launch call takes as long as a "
        "kernel.")
    sync_in_step_pct: float = threshold(
        1.0, "%", "sync_in_step: blocking syncs and device-to-host copies take at least this % of step time.")
    pageable_pct: float = threshold(
        10.0, "%", "pageable_copies: pageable host memory copies take at least this % of all memcpy time.")
    comm_min_pct: float = threshold(
        5.0, "%", "comm_overlap: communication kernels run for at least this % of the device span, ...")
    comm_overlap_pct: float = threshold(
        50.0, "%", "comm_overlap: ... and less than this % of it overlaps compute kernels.")
    queue_depth: int = threshold(
        960, "entries", "deep_stream_queue: a stream queue this deep is near CUDA's ~1024-entry launch queue "
        "limit.")


def launch_bound(ctx: Context) -> list[Insight]:
    """Mostly short kernels, GPU underused, and a launch call costing as much as a kernel runs."""
    b, th, out = ctx.batch, ctx.th, []
    launches = ctx.name_rows(LAUNCH_API)
    multi = "ranks" in ctx.summary
    kernels = np.flatnonzero(b.kind == Kind.KERNEL)
    for key, d in ctx.summary["devices"].items():
        rank, device = (map(int, key.split(":")) if multi else (None, int(key)))
        k = kernels[b.device[kernels] == device]
        la = launches
        if rank is not None:
            k, la = k[b.rank[k] == rank], la[b.rank[la] == rank]
        if len(k) < 10 or not len(la):
            continue
        kd = (b.end_ns[k] - b.start_ns[k]) / 1e3
        short = float((kd < th.short_kernel_us).mean())
        med_kernel = float(np.median(kd))
        med_launch = float(np.median(b.end_ns[la] - b.start_ns[la])) / 1e3
        util = 100.0 - d["idle_pct"]
        if short >= th.short_kernel_fraction and util < th.launch_bound_util_pct and \
                med_launch >= med_kernel:
            out.append(insight(
                "launch_bound", "high", device_label(key), "Launch-bound: kernels are shorter than their launches",
                f"{short * 100:.0f}% of {len(k):,} kernels run under {th.short_kernel_us:g} µs "
                f"(median {med_kernel:.1f} µs) while a launch call takes {med_launch:.1f} µs (median); "
                f"the GPU is busy only {util:.1f}%.",
                "Cut per-kernel launch overhead: capture the step with CUDA/HIP graphs "
                "(torch.cuda.graphs / torch.compile(mode='reduce-overhead')), fuse small ops with "
                "torch.compile, or increase the work per kernel (batch size).",
                short_fraction=short, median_kernel_us=med_kernel, median_launch_us=med_launch,
                util_pct=util))
    return out


def sync_in_step(ctx: Context) -> list[Insight]:
    """Blocking syncs (cuda*Synchronize, .item()), blocking copies (cudaMemcpy, hipMemcpyWithStream)
    and device-to-host copies inside steps."""
    b = ctx.batch
    step_ns = ctx.step_time_ns()
    if not step_ns:
        return []
    syncs = ctx.in_steps(ctx.name_rows(lambda s: blocking_call(s) is not None))
    items = ctx.in_steps(ctx.name_rows(SCALAR_READ_OPS))
    dtoh = np.flatnonzero((b.kind == Kind.MEMCPY) & (b.subkind == MemcpyKind.DtoH))
    dtoh_launches = ctx.corr.launch_of_gpu[np.isin(ctx.corr.gpu_rows, dtoh)]
    dtoh_in = ctx.in_steps(dtoh_launches[dtoh_launches >= 0])
    blocked = merged_length(b.start_ns[syncs], b.end_ns[syncs])
    pct = 100.0 * blocked / step_ns
    if not len(syncs) or pct < ctx.th.sync_in_step_pct:
        return []
    counts: dict[str, int] = {}
    for n in b.names(syncs):
        counts[n] = counts.get(n, 0) + 1
    steps = len(ctx.step_rows)
    return [insight(
        "sync_in_step", "medium", "profile", "Host-device synchronization inside steps",
        f"{_count(len(syncs), 'blocking sync or copy call')} in {_count(steps, 'step')} ("
        + ", ".join(f"{n} ×{c}" for n, c in sorted(counts.items(), key=lambda kv: -kv[1]))
        + f") held the CPU {blocked / 1e6:,.2f} ms, {pct:.1f}% of step time (threshold "
        f"{ctx.th.sync_in_step_pct:g}%); {_count(len(items), '.item() read')} and "
        f"{_count(len(dtoh_in), 'device-to-host copy', 'device-to-host copies')} happened inside steps.",
        "Keep values on the GPU inside the step: avoid .item(), .cpu(), .tolist(), print() of "
        "tensors and explicit torch.cuda.synchronize(); log metrics every N steps or asynchronously "
        "(non_blocking copies to pinned memory).",
        sync_calls=counts, blocked_us=blocked / 1e3, blocked_pct=pct, item_calls=len(items),
        dtoh_copies=len(dtoh_in))]


def _count(n: int, noun: str, plural: str = "") -> str:
    """``n`` and ``noun``, in the plural unless ``n`` is 1 ("1 step", "3 steps")."""
    return f"{n} {noun}" if n == 1 else f"{n} {plural or noun + 's'}"


def pageable_copies(ctx: Context) -> list[Insight]:
    """Copies from or to pageable host memory (name says ``Pageable``) ≥ ``pageable_pct`` % of copy time."""
    b = ctx.batch
    memcpy = np.flatnonzero(b.kind == Kind.MEMCPY)
    if not len(memcpy):
        return []
    ids = [i for i, s in enumerate(b.strings) if "Pageable" in s]
    rows = memcpy[np.isin(b.name[memcpy], ids)]
    total = float((b.end_ns[memcpy] - b.start_ns[memcpy]).sum())
    time = float((b.end_ns[rows] - b.start_ns[rows]).sum())
    pct = 100.0 * time / total if total else 0.0
    if not len(rows) or pct < ctx.th.pageable_pct:
        return []
    nbytes = int(b.bytes[rows][b.bytes[rows] > 0].sum())
    htod = int((b.subkind[rows] == MemcpyKind.HtoD).sum())
    return [insight(
        "pageable_copies", "medium", "profile", "Copies from pageable host memory",
        f"{len(rows)} copies ({htod} host-to-device) used pageable memory: {nbytes / 2**20:,.1f} MiB "
        f"in {time / 1e6:,.2f} ms, {pct:.1f}% of all memcpy time (threshold {ctx.th.pageable_pct:g}%). "
        "Pageable copies are staged through a bounce buffer and cannot overlap compute.",
        "Pin host memory: DataLoader(pin_memory=True) or tensor.pin_memory(), then copy with "
        ".to(device, non_blocking=True).",
        copies=len(rows), bytes=nbytes, time_us=time / 1e3, pct_of_memcpy=pct)]


def _most_exposed(summary: Summary, rank: int | None, device: int) -> str:
    """The collectives and streams of a device whose time was most exposed (the summary's
    ``communication`` section), as a sentence; "" when none was."""
    rows = [r for r in (summary.get("communication") or {}).get("by_collective", [])
            if r["device"] == device and (rank is None or r.get("rank", rank) == rank) and r["exposed_us"] > 0]
    if not rows:
        return ""
    shown = ", ".join(f"{r['collective']} on stream {r['stream']} ({r['exposed_us'] / 1e3:,.1f} ms exposed "
                      f"of {r['total_us'] / 1e3:,.1f} ms)" for r in rows[:3])
    return f" Most exposed: {shown}."


def comm_overlap(ctx: Context) -> list[Insight]:
    """Communication kernels ≥ ``comm_min_pct`` % of the span, overlapping compute < ``comm_overlap_pct`` %."""
    b = ctx.batch
    out: list[Insight] = []
    rows = ctx.corr.gpu_rows
    if not len(rows):
        return out
    classes = classify(b, rows)
    comm_c, comp_c = KERNEL_CLASSES.index(COMMUNICATION), KERNEL_CLASSES.index(COMPUTE)
    multi = "ranks" in ctx.summary
    for key, d in ctx.summary["devices"].items():
        rank, device = (map(int, key.split(":")) if multi else (None, int(key)))
        mine = b.device[rows] == device
        if rank is not None:
            mine &= b.rank[rows] == rank
        comm, comp = rows[mine & (classes == comm_c)], rows[mine & (classes == comp_c)]
        if not len(comm):
            continue
        c_len = merged_length(b.start_ns[comm], b.end_ns[comm])
        both = np.concatenate((comm, comp))
        overlap = c_len + merged_length(b.start_ns[comp], b.end_ns[comp]) - \
            merged_length(b.start_ns[both], b.end_ns[both])
        share = 100.0 * c_len / 1e3 / d["span_us"] if d["span_us"] else 0.0
        overlap_pct = 100.0 * overlap / c_len if c_len else 100.0
        if share >= ctx.th.comm_min_pct and overlap_pct < ctx.th.comm_overlap_pct:
            out.append(insight(
                "comm_overlap", "medium", device_label(key), "Communication does not overlap computation",
                f"Communication kernels ran {c_len / 1e6:,.1f} ms ({share:.1f}% of the span); only "
                f"{overlap_pct:.1f}% of that overlapped compute kernels (threshold "
                f"{ctx.th.comm_overlap_pct:g}%).{_most_exposed(ctx.summary, rank, device)}",
                "Overlap collectives with compute: DDP bucketing (bucket_cap_mb), FSDP prefetching "
                "(backward_prefetch/forward_prefetch), async collectives on a separate stream, and "
                "avoid syncs that serialize the communication stream.",
                comm_us=c_len / 1e3, comm_pct=share, overlap_pct=overlap_pct))
    return out


def deep_stream_queue(ctx: Context) -> list[Insight]:
    """A stream's queue of launched-but-not-started ops reaching ``queue_depth``."""
    deep = [s for s in ctx.summary["streams"] if s["max_queue_depth"] >= ctx.th.queue_depth]
    return [insight(
        "deep_stream_queue", "low", f"rank {s['rank']} device {s['device']} stream {s['stream']}",
        "Stream queue near the launch-queue limit",
        f"Up to {s['max_queue_depth']} ops were queued on the stream (threshold {ctx.th.queue_depth}); "
        "at about 1024 pending launches the CPU blocks in the launch call.",
        "The CPU runs far ahead of the GPU, which is fine for throughput, but the GPU is the "
        "bottleneck: optimize the top kernels (mixed precision, fused ops, torch.compile). Blocking "
        "launches hide CPU-side timings, so read CPU ops with care.",
        max_queue_depth=s["max_queue_depth"]) for s in deep]


