"""Dashboard figures that the summary does not hold: utilization over time, CPU active time, precision.

Definitions (stated next to the code):

- **Utilization over time** of a device: the device's span (first GPU op start to last GPU op end) is
  cut into ``buckets`` equal buckets; a bucket's utilization is the merged GPU-op busy time inside it
  divided by the bucket length, in %. The busy time of all buckets adds up to the summary's
  ``devices[*].busy_us``.
- **CPU active time** of a rank: the union of the intervals of its CPU-side events (CPU ops, runtime and
  driver calls, Python functions, user annotations) over all its threads, against the rank's event
  window. Known only where the trace records CPU-side events.
- **Kernel precision**: guessed from the kernel name (``fp16``/``half``/``h884``…, ``bf16``, ``tf32``,
  ``fp32``/``sgemm``/``float``, ``int8``/``i8``…); kernels whose name tells nothing are ``unknown``.
  Summed from the summary's ``kernels.by_name`` rows, so the totals add up to ``kernels.total_us``.
  The name is lowered once and searched with plain alternations (no backtracking ``.*``), so the
  time is linear in its length.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from cuda_tracer.model.array_sets import distinct
from cuda_tracer.model.events import GPU_OP_KINDS, EventBatch, Kind, kinds_in

from .attribution.operators import annotation_rows
from .stats import unique_rows
from .summary_schema import KernelRow

CPU_KINDS = (Kind.CPU_OP, Kind.RUNTIME, Kind.DRIVER, Kind.PYTHON_FUNCTION, Kind.USER_ANNOTATION)

# Order matters: the first pattern that matches names the precision. Matched against the lowered
# name (``xmma...tf32`` needs no pattern of its own: ``tf32`` alone matches it).
_PRECISIONS = (
    ("int8", re.compile(r"int8|(?<![a-z])i8(?![a-z0-9])|imma|s8s8|u8s8|_i8_")),
    ("bf16", re.compile(r"bf16|bfloat16")),
    ("fp16", re.compile(r"fp16|f16(?!_f32)|half|h884|h1688|h16816|hgemm|__half")),
    ("tf32", re.compile(r"tf32|s1688gemm|s16816gemm")),
    ("fp32", re.compile(r"fp32|f32|sgemm|float(?!16)|s884|s161616")),
)


def kernel_precision(name: str) -> str:
    """The precision a kernel name tells (``fp16``, ``bf16``, ``tf32``, ``fp32``, ``int8``) or ``unknown``."""
    lowered = name.lower()
    for precision, pattern in _PRECISIONS:
        if pattern.search(lowered):
            return precision
    return "unknown"


def precision_times(by_name: list[KernelRow]) -> dict[str, float]:
    """Kernel time (µs) per precision, from the summary's ``kernels.by_name`` rows."""
    out: dict[str, float] = {}
    for row in by_name:
        p = kernel_precision(row["name"])
        out[p] = out.get(p, 0.0) + row["total_us"]
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _busy_per_bucket(starts: np.ndarray, ends: np.ndarray, lo: int, width: float, n: int) -> np.ndarray:
    """Merged busy ns of intervals in each of ``n`` buckets of ``width`` ns starting at ``lo``."""
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum.accumulate(ends[order])
    new = np.concatenate(([True], s[1:] > e[:-1]))
    first = np.flatnonzero(new)
    last = np.append(first[1:], len(s)) - 1
    ms, me = (s[first] - lo).astype(np.float64), (e[last] - lo).astype(np.float64)
    edges = np.arange(n + 1, dtype=np.float64) * width
    # Busy time before each edge = sum over merged intervals of clip(edge - start, 0, length).
    before = np.array([np.clip(edge - ms, 0, me - ms).sum() for edge in edges])
    return np.diff(before)


def utilization_over_time(batch: EventBatch, buckets: int = 100,
                          multi_rank: bool = False) -> dict[str, dict[str, Any]]:
    """Per device (keyed as the summary keys devices): bucket start offsets, width and utilization %."""
    rows = np.flatnonzero(kinds_in(batch.kind, GPU_OP_KINDS))
    out: dict[str, dict[str, Any]] = {}
    if not len(rows):
        return out
    keys = np.stack([batch.rank[rows], batch.device[rows]], axis=1)
    for rank, device in unique_rows(keys, counts=True)[0].tolist():
        r = rows[(keys[:, 0] == rank) & (keys[:, 1] == device)]
        starts, ends = batch.start_ns[r], batch.end_ns[r]
        lo, hi = int(starts.min()), int(ends.max())
        n = buckets if hi > lo else 1
        width = max(hi - lo, 1) / n
        busy = _busy_per_bucket(starts, ends, lo, width, n)
        key = f"{rank}:{device}" if multi_rank else str(device)
        out[key] = {"start_ns": lo, "bucket_us": width / 1e3, "busy_us": (busy / 1e3).tolist(),
                    "util_pct": (100.0 * busy / width).tolist()}
    return out


def cpu_active(batch: EventBatch) -> dict[str, dict[str, float]]:
    """Per rank: CPU active (union of CPU-side event intervals) and window time in µs, where known."""
    from .breakdown import merged_length

    out: dict[str, dict[str, float]] = {}
    cpu = kinds_in(batch.kind, CPU_KINDS)
    for rank in distinct(batch.rank).tolist():
        in_rank = batch.rank == rank
        rows = np.flatnonzero(cpu & in_rank)
        if not len(rows):
            continue
        window = int(batch.end_ns[in_rank].max() - batch.start_ns[in_rank].min())
        active = merged_length(batch.start_ns[rows], batch.end_ns[rows])
        out[str(rank)] = {"active_us": active / 1e3, "window_us": window / 1e3,
                          "active_pct": 100.0 * active / window if window else 0.0}
    return out


def annotation_durations(batch: EventBatch, limit: int = 20_000) -> dict[str, list[float]]:
    """Durations (µs) of each CPU and GPU user annotation name, for the annotation histogram (capped).

    Steps have their own histogram (the summary's ``steps.items``); torch's own ranges are not the
    user's annotations."""
    rows = np.sort(np.concatenate([annotation_rows(batch), annotation_rows(batch, Kind.GPU_USER_ANNOTATION)]))
    out: dict[str, list[float]] = {}
    durs = (batch.end_ns[rows] - batch.start_ns[rows]) / 1e3
    for name_id in distinct(batch.name[rows]).tolist():
        sel = durs[batch.name[rows] == name_id]
        out[batch.strings[name_id]] = sel[:limit].tolist()
    return out
