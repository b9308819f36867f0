"""What one rank did in each of its steps, and the collective kernels it ran: the per-rank inputs of
clock alignment (``align``) and of the straggler analysis (``stragglers``).

Per step (a ``ProfilerStep``-like step event of the rank), every figure in µs of that step's window:
``compute_us`` and ``communication_us`` (compute and collective kernel time, clipped to the window),
``memory_us`` (copies and memsets), ``gpu_busy_us`` (the merged time any GPU op ran), ``gpu_idle_us``,
``loading_us`` (DataLoader ``__next__`` calls), ``launch_us`` (runtime/driver calls that launch GPU
work) and ``host_busy_us`` (merged time of the host's operators and annotations).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cuda_tracer.model.correlate import Correlation
from cuda_tracer.model.events import GPU_OP_KINDS, EventBatch, Kind, kinds_in

from ..analysis.breakdown import COMMUNICATION, COMPUTE, KERNEL_CLASSES, classify, merged_length
from ..analysis.insights.context import is_dataloader_next

MAX_COLLECTIVES = 4096
"""The most collective kernels a rank hands on for clock alignment (its first ones, by end time):
enough for a robust offset, bounded whatever the trace's length."""

_HOST_KINDS = (Kind.CPU_OP, Kind.USER_ANNOTATION)


def _clipped(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    inside = (starts < hi) & (ends > lo)
    return np.maximum(starts[inside], lo), np.minimum(ends[inside], hi)


def step_figures(batch: EventBatch, corr: Correlation) -> list[dict[str, Any]]:
    """One row per step of the rank: ``{step, start_ns, end_ns, duration_us, ...}`` (module docstring)."""
    steps = np.flatnonzero(batch.kind == Kind.STEP)
    if not len(steps):
        return []
    numbers = batch.extra("step")
    gpu = np.flatnonzero(kinds_in(batch.kind, GPU_OP_KINDS))
    classes = classify(batch, gpu)
    names = batch.strings
    loader_ids = [i for i, n in enumerate(names) if is_dataloader_next(n)]
    loader = np.flatnonzero(np.isin(batch.name, loader_ids) & ~kinds_in(batch.kind, GPU_OP_KINDS)) \
        if loader_ids else np.zeros(0, np.int64)
    host = np.flatnonzero(kinds_in(batch.kind, _HOST_KINDS))
    launch = corr.launch_rows
    s_all, e_all = batch.start_ns, batch.end_ns
    groups = {"compute_us": gpu[classes == KERNEL_CLASSES.index(COMPUTE)],
              "communication_us": gpu[classes == KERNEL_CLASSES.index(COMMUNICATION)],
              "memory_us": gpu[(classes != KERNEL_CLASSES.index(COMPUTE))
                               & (classes != KERNEL_CLASSES.index(COMMUNICATION))]}
    out = []
    for r in sorted(steps.tolist(), key=lambda r: int(s_all[r])):
        lo, hi = int(s_all[r]), int(e_all[r])
        row: dict[str, Any] = {"step": int(numbers.get(r, -1)), "start_ns": lo, "end_ns": hi,
                               "duration_us": (hi - lo) / 1e3}
        for key, rows in groups.items():
            a, b = _clipped(s_all[rows], e_all[rows], lo, hi)
            row[key] = float((b - a).sum()) / 1e3
        a, b = _clipped(s_all[gpu], e_all[gpu], lo, hi)
        row["gpu_busy_us"] = merged_length(a, b) / 1e3
        row["gpu_idle_us"] = row["duration_us"] - row["gpu_busy_us"]
        a, b = _clipped(s_all[loader], e_all[loader], lo, hi)
        row["loading_us"] = merged_length(a, b) / 1e3
        a, b = _clipped(s_all[launch], e_all[launch], lo, hi)
        row["launch_us"] = float((b - a).sum()) / 1e3
        a, b = _clipped(s_all[host], e_all[host], lo, hi)
        row["host_busy_us"] = merged_length(a, b) / 1e3
        out.append(row)
    return out


def collectives(batch: EventBatch) -> dict[str, Any]:
    """The rank's collective kernels by end time (at most ``MAX_COLLECTIVES``): ``{names: [...],
    name: [index into names], start_ns: [...], end_ns: [...]}``."""
    kernels = np.flatnonzero(batch.kind == Kind.KERNEL)
    comm = kernels[classify(batch, kernels) == KERNEL_CLASSES.index(COMMUNICATION)]
    comm = comm[np.argsort(batch.end_ns[comm], kind="stable")][:MAX_COLLECTIVES]
    ids, index = np.unique(batch.name[comm], return_inverse=True)
    return {"names": [batch.strings[i] for i in ids.tolist()], "name": index.reshape(-1).astype(np.int32),
            "start_ns": batch.start_ns[comm].copy(), "end_ns": batch.end_ns[comm].copy()}
