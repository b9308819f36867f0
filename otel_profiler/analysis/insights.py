"""Insights: rules that turn a profile and its summary into findings, each with evidence and a fix.

``insights(profile, summary, thresholds)`` runs every rule in ``RULES`` and returns a list of dicts::

    {"rule": "low_gpu_utilization", "severity": "high"|"medium"|"low", "scope": "device 1",
     "title": "...", "evidence": "...", "recommendation": "...", "metrics": {...}}

Thresholds live in one dataclass, ``Thresholds``; each field documents what it bounds. Defaults follow
the SageMaker Debugger profiler rules where one exists (``LowGPUUtilization`` p95 70 %, ``StepOutlier``,
``LoadBalancing``, ``GPUMemoryIncrease`` 10 points, ``BatchSize`` 70/70/70, ``Dataloader``); the
others are the first things a GPU performance engineer checks. Rules that need data a trace lacks
(steps, CPU-side events, memory samples, several ranks) stay silent rather than guess.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields
from typing import Any, Callable

import numpy as np

from cuda_tracer.correlate import Correlation, correlate
from cuda_tracer.events import EventBatch, Kind, MemcpyKind
from cuda_tracer.profile import Profile

from .breakdown import COMMUNICATION, COMPUTE, KERNEL_CLASSES, classify, merged_length
from .platform import blocking_call


@dataclass(frozen=True)
class Thresholds:
    """Every threshold the rules use. Override any with ``Thresholds(name=value)`` or ``--threshold``."""

    gpu_util_low_pct: float = 70.0
    """low_gpu_utilization: a device busy less than this % of its span is underutilized (SageMaker p95 70)."""
    host_wait_pct: float = 20.0
    """cpu_bottleneck: GPU idle waiting for the CPU (host wait) for at least this % of the device span."""
    step_outlier_mads: float = 3.0
    """step_outliers: a step slower than median + this many scaled MADs (robust sigmas) is an outlier."""
    step_outlier_min_excess_pct: float = 5.0
    """step_outliers: ... and at least this % slower than the median step."""
    min_steps: int = 3
    """step_outliers: fewer steps than this say nothing about outliers."""
    load_imbalance_points: float = 20.0
    """load_balancing: utilization of the most and least busy GPU this many % points apart."""
    straggler_pct: float = 5.0
    """straggler_ranks: a rank whose median step is this % above the median of all ranks."""
    memory_growth_pct_points: float = 10.0
    """gpu_memory_growth: allocated memory rising by this many points of device memory (SageMaker 10)."""
    memory_window_fraction: float = 0.1
    """gpu_memory_growth: first and last fraction of memory samples averaged (moving-average window)."""
    batch_gpu_util_pct: float = 70.0
    """batch_size_too_small: GPU busy below this %, ... (SageMaker BatchSize 70)."""
    batch_memory_pct: float = 70.0
    """batch_size_too_small: ... and peak allocated GPU memory below this % of device memory."""
    dataloader_pct: float = 10.0
    """dataloader: time in DataLoader ``__next__`` at least this % of step (or profile) time."""
    short_kernel_us: float = 10.0
    """launch_bound: kernels shorter than this are 'short'."""
    short_kernel_fraction: float = 0.5
    """launch_bound: at least this fraction of kernels are short, ..."""
    launch_bound_util_pct: float = 70.0
    """launch_bound: ... the GPU is busy less than this %, and a launch call takes as long as a kernel."""
    sync_in_step_pct: float = 1.0
    """sync_in_step: blocking syncs and device-to-host copies take at least this % of step time."""
    pageable_pct: float = 10.0
    """pageable_copies: pageable host memory copies take at least this % of all memcpy time."""
    comm_min_pct: float = 5.0
    """comm_overlap: communication kernels run for at least this % of the device span, ..."""
    comm_overlap_pct: float = 50.0
    """comm_overlap: ... and less than this % of it overlaps compute kernels."""
    queue_depth: int = 960
    """deep_stream_queue: a stream queue this deep is near CUDA's ~1024-entry launch queue limit."""

    @classmethod
    def parse(cls, items: list[str]) -> "Thresholds":
        """From ``name=value`` strings (e.g. ``gpu_util_low_pct=60``); raises ``ValueError``."""
        types = {f.name: f.type for f in fields(cls)}
        values: dict[str, Any] = {}
        for item in items:
            name, sep, value = item.partition("=")
            name = name.strip()
            if not sep or name not in types:
                raise ValueError(f"unknown threshold {item!r}; known: {', '.join(types)}")
            values[name] = int(value) if types[name] in ("int", int) else float(value)
        return cls(**values)


SCALAR_READ_OPS = ("aten::item", "aten::_local_scalar_dense")
LAUNCH_API = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
              "hipLaunchKernel", "hipExtModuleLaunchKernel", "hipModuleLaunchKernel")
CUDA_DEVICE_TYPE = 1  # Kineto's [memory] "Device Type": 0 CPU, 1 CUDA
HOST_KINDS = (Kind.CPU_OP, Kind.USER_ANNOTATION, Kind.PYTHON_FUNCTION, Kind.RUNTIME, Kind.DRIVER,
              Kind.OTHER)
"""Host-side kinds: rules find their events by name among all of them, since one trace records as an
operator what another records as a user annotation or a Python function."""
_DATALOADER_NEXT = re.compile(r"DataLoader.*__next__|utils/data/dataloader\.py\(\d+\): __next__")


class _Context:
    """What several rules read, computed once: the batch, its correlation, step windows per rank."""

    def __init__(self, profile: Profile, summary: dict, th: Thresholds) -> None:
        self.profile, self.summary, self.th = profile, summary, th
        self.batch: EventBatch = profile.batch()
        self._corr: Correlation | None = None
        b = self.batch
        steps = np.flatnonzero(b.kind == Kind.STEP)
        self.step_rows = steps[np.lexsort((b.start_ns[steps], b.rank[steps]))]

    @property
    def corr(self) -> Correlation:
        if self._corr is None:
            self._corr = correlate(self.batch)
        return self._corr

    def name_rows(self, names, kinds: tuple[Kind, ...] = HOST_KINDS) -> np.ndarray:
        """Rows of ``kinds`` whose name is in ``names`` (a collection, or a predicate on a name)."""
        b = self.batch
        match = names if callable(names) else names.__contains__
        ids = [i for i, s in enumerate(b.strings) if match(s)]
        return np.flatnonzero(np.isin(b.name, ids) & np.isin(b.kind, np.asarray(kinds, np.uint8)))

    def in_steps(self, rows: np.ndarray) -> np.ndarray:
        """The subset of ``rows`` whose start lies inside a step of the same rank."""
        b, steps = self.batch, self.step_rows
        if not len(steps) or not len(rows):
            return rows[:0]
        keep = np.zeros(len(rows), bool)
        for rank in np.unique(b.rank[steps]).tolist():
            s = steps[b.rank[steps] == rank]
            lo, hi = b.start_ns[s], b.end_ns[s]
            mine = b.rank[rows] == rank
            t = b.start_ns[rows]
            i = np.searchsorted(lo, t, side="right") - 1
            ok = (i >= 0) & (t < hi[np.maximum(i, 0)])
            keep |= mine & ok
        return rows[keep]

    def step_time_ns(self) -> int:
        b = self.batch
        return int((b.end_ns[self.step_rows] - b.start_ns[self.step_rows]).sum())


def _insight(rule: str, severity: str, scope: str, title: str, evidence: str,
             recommendation: str, **metrics: Any) -> dict[str, Any]:
    return {"rule": rule, "severity": severity, "scope": scope, "title": title,
            "evidence": evidence, "recommendation": recommendation, "metrics": metrics}


def _device_label(key: str) -> str:
    return f"device {key}" if ":" not in key else "rank {} device {}".format(*key.split(":"))


# ---------------------------------------------------------------- rules
def low_gpu_utilization(ctx: _Context) -> list[dict]:
    """GPU busy (merged GPU-op time) below ``gpu_util_low_pct`` % of the device's span."""
    out = []
    for key, d in ctx.summary["devices"].items():
        util = 100.0 - d["idle_pct"]
        if d["span_us"] > 0 and util < ctx.th.gpu_util_low_pct:
            out.append(_insight(
                "low_gpu_utilization", "high" if util < ctx.th.gpu_util_low_pct / 2 else "medium",
                _device_label(key), "Low GPU utilization",
                f"The GPU was busy {util:.1f}% of its {d['span_us'] / 1e3:,.1f} ms span "
                f"(idle {d['idle_us'] / 1e3:,.1f} ms; threshold {ctx.th.gpu_util_low_pct:g}%).",
                "Find what the GPU waits for in the timeline's idle gaps: minimize blocking calls "
                "(syncs, .item()), overlap data loading with compute, increase the batch size, or "
                "change the distributed strategy.",
                util_pct=util, idle_us=d["idle_us"], span_us=d["span_us"]))
    return out


def cpu_bottleneck(ctx: _Context) -> list[dict]:
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
            out.append(_insight(
                "cpu_bottleneck", "high", _device_label(key), "CPU bottleneck: the GPU waits for the host",
                f"The GPU sat idle about {wait / 1e3:,.1f} ms waiting for the CPU to launch the next op "
                f"({pct:.1f}% of the {d['span_us'] / 1e3:,.1f} ms device span; {100 * host / total:.0f}% "
                f"of stream gaps are host waits; threshold {ctx.th.host_wait_pct:g}%).",
                "Move CPU work off the training loop: more DataLoader workers (num_workers) with "
                "prefetching, fewer Python-side operations per step, CUDA graphs or torch.compile "
                "to cut launch overhead.",
                host_wait_us=wait, host_wait_pct=pct))
    return out


def step_outliers(ctx: _Context) -> list[dict]:
    """Steps slower than median + ``step_outlier_mads`` scaled MADs and ``min_excess_pct`` % slower."""
    b, th, out = ctx.batch, ctx.th, []
    for rank in np.unique(b.rank[ctx.step_rows]).tolist():
        rows = ctx.step_rows[b.rank[ctx.step_rows] == rank]
        if len(rows) < th.min_steps:
            continue
        d = (b.end_ns[rows] - b.start_ns[rows]).astype(np.float64) / 1e3
        med = float(np.median(d))
        mad = 1.4826 * float(np.median(np.abs(d - med)))
        limit = max(med + th.step_outlier_mads * mad, med * (1 + th.step_outlier_min_excess_pct / 100))
        slow = np.flatnonzero(d > limit)
        if len(slow):
            names = b.names(rows[slow])
            out.append(_insight(
                "step_outliers", "medium", f"rank {rank}", "Step-time outliers",
                f"{len(slow)} of {len(rows)} steps took longer than {limit / 1e3:,.2f} ms "
                f"(median {med / 1e3:,.2f} ms): " +
                ", ".join(f"{n} {v / 1e3:,.2f} ms" for n, v in zip(names[:5], d[slow][:5])) + ".",
                "Open the slow steps in the timeline and compare them with a median step: look for "
                "data-loading stalls, I/O, garbage collection, recompilation or checkpointing "
                "correlated with them.",
                steps=names, durations_us=d[slow].tolist(), median_us=med, limit_us=limit))
    return out


def load_balancing(ctx: _Context) -> list[dict]:
    """GPU utilization (busy % of span) of the most and least busy device ``load_imbalance_points`` apart.

    SageMaker's LoadBalancing compares per-GPU utilization histograms; with a trace we compare each
    device's utilization over its span, across the devices of one rank and across ranks.
    """
    devices = ctx.summary["devices"]
    if len(devices) < 2:
        return []
    util = {k: 100.0 - v["idle_pct"] for k, v in devices.items()}
    hi_key, lo_key = max(util, key=util.get), min(util, key=util.get)
    points = util[hi_key] - util[lo_key]
    if points < ctx.th.load_imbalance_points:
        return []
    return [_insight(
        "load_balancing", "medium", "all devices", "Unbalanced work across GPUs",
        f"GPU utilization ranges from {util[lo_key]:.1f}% ({_device_label(lo_key)}) to "
        f"{util[hi_key]:.1f}% ({_device_label(hi_key)}): {points:.1f} points apart (threshold "
        f"{ctx.th.load_imbalance_points:g} points).",
        "Balance the work: shard data and model evenly, check for uneven sequence lengths or "
        "embedding tables, or choose a different distributed strategy.",
        util_pct=util, imbalance_points=points)]


def straggler_ranks(ctx: _Context) -> list[dict]:
    """Ranks whose median step time is ``straggler_pct`` % above the median over ranks."""
    b = ctx.batch
    ranks = np.unique(b.rank[ctx.step_rows]).tolist()
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
            out.append(_insight(
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


def _memory_samples(ctx: _Context) -> dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]:
    """(rank, device) → (times, Total Allocated bytes) of CUDA [memory] events, in time order."""
    b = ctx.batch
    alloc, dtype = b.extra("total_allocated"), b.extra("device_type")
    rows = np.array([r for r in alloc if dtype.get(r) == CUDA_DEVICE_TYPE], np.int64)
    out: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
    if not len(rows):
        return out
    rows = rows[np.argsort(b.start_ns[rows], kind="stable")]
    values = np.array([alloc[int(r)] for r in rows], np.float64)
    for rank, device in set(zip(b.rank[rows].tolist(), b.device[rows].tolist())):
        sel = (b.rank[rows] == rank) & (b.device[rows] == device)
        out[(rank, device)] = (b.start_ns[rows[sel]], values[sel])
    return out


def gpu_memory_growth(ctx: _Context) -> list[dict]:
    """Moving average of allocated memory rising by ``memory_growth_pct_points`` of device memory."""
    totals, out = _device_memory(ctx.profile), []
    for (rank, device), (_, values) in _memory_samples(ctx).items():
        n = max(1, int(len(values) * ctx.th.memory_window_fraction))
        if len(values) < 2 * n:
            continue
        first, last = float(values[:n].mean()), float(values[-n:].mean())
        total = totals.get((rank, device)) or float(values.max())
        points = 100.0 * (last - first) / total
        if points >= ctx.th.memory_growth_pct_points:
            out.append(_insight(
                "gpu_memory_growth", "medium", f"rank {rank} device {device}", "GPU memory keeps growing",
                f"Allocated memory rose from {first / 2**30:,.2f} GiB to {last / 2**30:,.2f} GiB "
                f"(moving averages over {n} samples), {points:.1f} points of the device's "
                f"{total / 2**30:,.1f} GiB (threshold {ctx.th.memory_growth_pct_points:g} points).",
                "Look for tensors kept alive across steps (losses accumulated with their graph, "
                "growing caches, lists of outputs); call .detach()/.item() on logged values. Choose a "
                "larger instance if close to the device's memory.",
                first_bytes=first, last_bytes=last, growth_points=points))
    return out


def batch_size_too_small(ctx: _Context) -> list[dict]:
    """GPU busy below ``batch_gpu_util_pct`` and peak memory below ``batch_memory_pct`` of the device."""
    totals, out = _device_memory(ctx.profile), []
    multi = "ranks" in ctx.summary
    for (rank, device), (_, values) in _memory_samples(ctx).items():
        total = totals.get((rank, device))
        d = ctx.summary["devices"].get(f"{rank}:{device}" if multi else str(device))
        if not total or not d:
            continue
        util, mem = 100.0 - d["idle_pct"], 100.0 * float(values.max()) / total
        if util < ctx.th.batch_gpu_util_pct and mem < ctx.th.batch_memory_pct:
            out.append(_insight(
                "batch_size_too_small", "medium", f"rank {rank} device {device}",
                "Batch size may be too small",
                f"GPU busy {util:.1f}% (threshold {ctx.th.batch_gpu_util_pct:g}%) and peak allocated "
                f"memory {float(values.max()) / 2**30:,.2f} GiB = {mem:.1f}% of "
                f"{total / 2**30:,.1f} GiB (threshold {ctx.th.batch_memory_pct:g}%).",
                "Increase the batch size (scaling the learning rate), or run on a smaller, cheaper "
                "GPU instance.",
                util_pct=util, peak_memory_pct=mem))
    return out


def dataloader(ctx: _Context) -> list[dict]:
    """Time in DataLoader ``__next__`` ≥ ``dataloader_pct`` % of step (or profile) time.

    The calls are found by name whatever their kind: ``enumerate(DataLoader)#...__next__`` as an
    operator or a user annotation, or the Python function ``torch/utils/data/dataloader.py(N):
    __next__``; their union is the loading time."""
    b = ctx.batch
    rows = ctx.name_rows(lambda s: bool(_DATALOADER_NEXT.search(s)))
    if not len(rows):
        return []
    loading = merged_length(b.start_ns[rows], b.end_ns[rows])
    whole = ctx.step_time_ns() or int(b.end_ns.max() - b.start_ns.min())
    pct = 100.0 * loading / whole if whole else 0.0
    if pct < ctx.th.dataloader_pct:
        return []
    single = any("SingleProcess" in b.strings[i] for i in set(b.name[rows].tolist()))
    return [_insight(
        "dataloader", "high", "profile", "Training waits for the data loader",
        f"{int(np.bincount(b.kind[rows]).max())} DataLoader __next__ calls took {loading / 1e6:,.1f} ms, {pct:.1f}% of "
        f"{'step' if ctx.step_time_ns() else 'profiled'} time (threshold {ctx.th.dataloader_pct:g}%)"
        + ("; the loader runs in the training process (num_workers=0)." if single else "."),
        "Set DataLoader(num_workers=N, pin_memory=True, prefetch_factor=2+, persistent_workers=True) "
        "with N near the CPU cores per GPU; move decoding/augmentation to the workers or the GPU.",
        loading_us=loading / 1e3, loading_pct=pct, single_process=single)]


def launch_bound(ctx: _Context) -> list[dict]:
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
            out.append(_insight(
                "launch_bound", "high", _device_label(key), "Launch-bound: kernels are shorter than their launches",
                f"{short * 100:.0f}% of {len(k):,} kernels run under {th.short_kernel_us:g} µs "
                f"(median {med_kernel:.1f} µs) while a launch call takes {med_launch:.1f} µs (median); "
                f"the GPU is busy only {util:.1f}%.",
                "Cut per-kernel launch overhead: capture the step with CUDA/HIP graphs "
                "(torch.cuda.graphs / torch.compile(mode='reduce-overhead')), fuse small ops with "
                "torch.compile, or increase the work per kernel (batch size).",
                short_fraction=short, median_kernel_us=med_kernel, median_launch_us=med_launch,
                util_pct=util))
    return out


def sync_in_step(ctx: _Context) -> list[dict]:
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
    counts = {}
    for n in b.names(syncs):
        counts[n] = counts.get(n, 0) + 1
    steps = len(ctx.step_rows)
    return [_insight(
        "sync_in_step", "medium", "profile", "Host-device synchronization inside steps",
        f"{len(syncs)} blocking sync or copy calls in {steps} steps ("
        + ", ".join(f"{n} ×{c}" for n, c in sorted(counts.items(), key=lambda kv: -kv[1]))
        + f") held the CPU {blocked / 1e6:,.2f} ms, {pct:.1f}% of step time (threshold "
        f"{ctx.th.sync_in_step_pct:g}%); {len(items)} .item() reads and {len(dtoh_in)} device-to-host "
        "copies happened inside steps.",
        "Keep values on the GPU inside the step: avoid .item(), .cpu(), .tolist(), print() of "
        "tensors and explicit torch.cuda.synchronize(); log metrics every N steps or asynchronously "
        "(non_blocking copies to pinned memory).",
        sync_calls=counts, blocked_us=blocked / 1e3, blocked_pct=pct, item_calls=len(items),
        dtoh_copies=len(dtoh_in))]


def pageable_copies(ctx: _Context) -> list[dict]:
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
    return [_insight(
        "pageable_copies", "medium", "profile", "Copies from pageable host memory",
        f"{len(rows)} copies ({htod} host-to-device) used pageable memory: {nbytes / 2**20:,.1f} MiB "
        f"in {time / 1e6:,.2f} ms, {pct:.1f}% of all memcpy time (threshold {ctx.th.pageable_pct:g}%). "
        "Pageable copies are staged through a bounce buffer and cannot overlap compute.",
        "Pin host memory: DataLoader(pin_memory=True) or tensor.pin_memory(), then copy with "
        ".to(device, non_blocking=True).",
        copies=len(rows), bytes=nbytes, time_us=time / 1e3, pct_of_memcpy=pct)]


def comm_overlap(ctx: _Context) -> list[dict]:
    """Communication kernels ≥ ``comm_min_pct`` % of the span, overlapping compute < ``comm_overlap_pct`` %."""
    b, out = ctx.batch, []
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
        both = np.r_[comm, comp]
        overlap = c_len + merged_length(b.start_ns[comp], b.end_ns[comp]) - \
            merged_length(b.start_ns[both], b.end_ns[both])
        share = 100.0 * c_len / 1e3 / d["span_us"] if d["span_us"] else 0.0
        overlap_pct = 100.0 * overlap / c_len if c_len else 100.0
        if share >= ctx.th.comm_min_pct and overlap_pct < ctx.th.comm_overlap_pct:
            out.append(_insight(
                "comm_overlap", "medium", _device_label(key), "Communication does not overlap computation",
                f"Communication kernels ran {c_len / 1e6:,.1f} ms ({share:.1f}% of the span); only "
                f"{overlap_pct:.1f}% of that overlapped compute kernels (threshold "
                f"{ctx.th.comm_overlap_pct:g}%).",
                "Overlap collectives with compute: DDP bucketing (bucket_cap_mb), FSDP prefetching "
                "(backward_prefetch/forward_prefetch), async collectives on a separate stream, and "
                "avoid syncs that serialize the communication stream.",
                comm_us=c_len / 1e3, comm_pct=share, overlap_pct=overlap_pct))
    return out


def deep_stream_queue(ctx: _Context) -> list[dict]:
    """A stream's queue of launched-but-not-started ops reaching ``queue_depth``."""
    deep = [s for s in ctx.summary["streams"] if s["max_queue_depth"] >= ctx.th.queue_depth]
    return [_insight(
        "deep_stream_queue", "low", f"rank {s['rank']} device {s['device']} stream {s['stream']}",
        "Stream queue near the launch-queue limit",
        f"Up to {s['max_queue_depth']} ops were queued on the stream (threshold {ctx.th.queue_depth}); "
        "at about 1024 pending launches the CPU blocks in the launch call.",
        "The CPU runs far ahead of the GPU, which is fine for throughput, but the GPU is the "
        "bottleneck: optimize the top kernels (mixed precision, fused ops, torch.compile). Blocking "
        "launches hide CPU-side timings, so read CPU ops with care.",
        max_queue_depth=s["max_queue_depth"]) for s in deep]


RULES: dict[str, Callable[[_Context], list[dict]]] = {
    "low_gpu_utilization": low_gpu_utilization,
    "cpu_bottleneck": cpu_bottleneck,
    "step_outliers": step_outliers,
    "load_balancing": load_balancing,
    "straggler_ranks": straggler_ranks,
    "gpu_memory_growth": gpu_memory_growth,
    "batch_size_too_small": batch_size_too_small,
    "dataloader": dataloader,
    "launch_bound": launch_bound,
    "sync_in_step": sync_in_step,
    "pageable_copies": pageable_copies,
    "comm_overlap": comm_overlap,
    "deep_stream_queue": deep_stream_queue,
}
"""Every rule, by name, in the order the report lists them."""

_SEVERITY = {"high": 0, "medium": 1, "low": 2}


def insights(profile: Profile, summary: dict, thresholds: Thresholds | None = None) -> list[dict]:
    """Run every rule; findings sorted by severity (rule order within a severity)."""
    ctx = _Context(profile, summary, thresholds or Thresholds())
    found = [i for rule in RULES.values() for i in rule(ctx)]
    return sorted(found, key=lambda i: _SEVERITY[i["severity"]])


def thresholds_doc() -> list[dict[str, Any]]:
    """Every threshold with its default and meaning (for documentation and the report)."""
    import inspect

    source = inspect.getsource(Thresholds)
    out = []
    for name, value in asdict(Thresholds()).items():
        after = source.split(f"    {name}:", 1)[1]
        doc = after.split('"""')[1] if '"""' in after else ""
        out.append({"name": name, "default": value, "meaning": " ".join(doc.split())})
    return out
