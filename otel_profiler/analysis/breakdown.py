"""Where GPU time goes: kernel classes, per-device temporal breakdown, per-stream idle breakdown.

Definitions follow Holistic Trace Analysis (HTA), stated next to the code:

- **Kernel class**: *communication* when the name looks like a collective library kernel (starts
  with ``nccl``/``rccl``/``hccl``, or holds ``ncclKernel``/``ncclDevKernel``, in any case), *memory*
  for memcpy and memset, *compute* for every other kernel. Plain substring tests on the lowered name:
  linear in its length.
- **Temporal breakdown** of a device: merge the intervals of every GPU op (kernel, memcpy, memset) of
  the device across its streams. ``span`` runs from the first op start to the last op end;
  ``busy`` is the merged busy time, ``idle = span - busy``; ``compute`` is the merged time of compute
  kernels (communication or copies overlapping compute count as compute);
  ``non_compute = span - compute - idle``.
- **Idle breakdown** of a stream: each gap between consecutive ops on the stream (sorted by start) is
  *host wait* when the next op's launch call started after the previous op ended (the GPU waited for
  the CPU), else *kernel wait* when the gap is shorter than ``consecutive_kernel_delay_ns`` (the
  normal spacing between back-to-back ops), else *other* (waiting on another stream, an event, ...).
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from cuda_tracer.model.correlate import Correlation
from cuda_tracer.model.events import GPU_OP_KINDS, EventBatch, Kind, kinds_in

from .stats import unique_rows

if TYPE_CHECKING:  # (the summary's types: a span export need not import them, 10 ms)
    from .summary_schema import DeviceBreakdown, DeviceTimes, StreamIdle

COMPUTE, COMMUNICATION, MEMORY = "compute", "communication", "memory"
KERNEL_CLASSES = (COMPUTE, COMMUNICATION, MEMORY)
_COLLECTIVE_PREFIXES = ("nccl", "rccl", "hccl")
_COLLECTIVE_PARTS = ("ncclkernel", "nccldevkernel")

CONSECUTIVE_KERNEL_DELAY_NS = 30_000
"""HTA's ``consecutive_kernel_delay`` is 30 in the trace's unit, which is µs for Kineto traces."""


@lru_cache(maxsize=1 << 13)
def kernel_class(kind: int, name: str) -> str:
    """A GPU op's class (remembered per name: a job's ranks share their kernel names)."""
    if kind != Kind.KERNEL:
        return MEMORY
    lowered = name.lower()
    collective = lowered.startswith(_COLLECTIVE_PREFIXES) or any(p in lowered for p in _COLLECTIVE_PARTS)
    return COMMUNICATION if collective else COMPUTE


def classify(batch: EventBatch, rows: np.ndarray) -> np.ndarray:
    """Kernel class (index into ``KERNEL_CLASSES``) of each GPU op in ``rows``: one regex per
    distinct kernel name, then a table lookup per op."""
    kernel = batch.kind[rows] == Kind.KERNEL
    table = _class_table(batch)
    return np.where(kernel, table[batch.name[rows]], np.uint8(KERNEL_CLASSES.index(MEMORY))).astype(np.uint8)


def _class_table(batch: EventBatch) -> np.ndarray:
    """Per string id: the class of the kernels of that name (made once per batch)."""
    table = batch.__dict__.get("_kernel_classes")
    if table is not None and len(table) == len(batch.strings) + 1:
        return table
    table = np.full(len(batch.strings) + 1, KERNEL_CLASSES.index(MEMORY), np.uint8)
    seen = np.zeros(len(table), bool)
    seen[batch.name[batch.kind == Kind.KERNEL]] = True
    for n in np.flatnonzero(seen).tolist():
        table[n] = KERNEL_CLASSES.index(kernel_class(Kind.KERNEL, batch.strings[n]))
    batch.__dict__["_kernel_classes"] = table
    return table


def merged_length(starts: np.ndarray, ends: np.ndarray) -> int:
    """Total length of the union of intervals."""
    if not len(starts):
        return 0
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum.accumulate(ends[order])
    new = np.concatenate(([True], s[1:] > e[:-1]))
    first = np.flatnonzero(new)
    last = np.append(first[1:], len(s)) - 1
    return int((e[last] - s[first]).sum())


def temporal_breakdown(batch: EventBatch, rows: np.ndarray | None = None,
                       is_compute: np.ndarray | None = None) -> list[DeviceTimes]:
    """One row per (rank, device): span, busy, idle, compute and non-compute time.

    ``rows`` defaults to every GPU op; ``is_compute`` (one flag per row) to the compute kernel class.
    """
    return [{"rank": rank, "device": device, **figures}
            for rank, device, figures in device_breakdowns(batch, rows, is_compute)]


def device_breakdowns(batch: EventBatch, rows: np.ndarray | None = None, is_compute: np.ndarray | None = None
                      ) -> list[tuple[int, int, DeviceBreakdown]]:
    """``temporal_breakdown`` as (rank, device, its figures)."""
    if rows is None:
        rows = np.flatnonzero(kinds_in(batch.kind, GPU_OP_KINDS))
    if not len(rows):
        return []
    if is_compute is None:
        is_compute = classify(batch, rows) == KERNEL_CLASSES.index(COMPUTE)
    out = []
    keys = np.stack([batch.rank[rows], batch.device[rows]], axis=1)
    for rank, device in unique_rows(keys, counts=True)[0].tolist():
        mask = (keys[:, 0] == rank) & (keys[:, 1] == device)
        r = rows[mask]
        starts, ends = batch.start_ns[r], batch.end_ns[r]
        span = int(ends.max() - starts.min())
        busy = merged_length(starts, ends)
        comp = is_compute[mask]
        compute = merged_length(starts[comp], ends[comp])
        idle = span - busy
        figures: DeviceBreakdown = {
            "ops": int(mask.sum()),
            "span_us": span / 1e3, "busy_us": busy / 1e3, "idle_us": idle / 1e3,
            "compute_us": compute / 1e3, "non_compute_us": (span - compute - idle) / 1e3,
            "idle_pct": _pct(idle, span), "compute_pct": _pct(compute, span),
            "non_compute_pct": _pct(span - compute - idle, span),
        }
        out.append((int(rank), int(device), figures))
    return out


def class_times(batch: EventBatch, rows: np.ndarray) -> dict[str, float]:
    """Summed (not merged) GPU time in µs per kernel class."""
    classes = classify(batch, rows)
    durs = (batch.end_ns[rows] - batch.start_ns[rows]).astype(np.float64)
    return {name: float(durs[classes == i].sum() / 1e3) for i, name in enumerate(KERNEL_CLASSES)}


def idle_breakdown(batch: EventBatch, corr: Correlation,
                   consecutive_kernel_delay_ns: int = CONSECUTIVE_KERNEL_DELAY_NS) -> list[StreamIdle]:
    """Per (rank, device, stream): idle time split into host wait, kernel wait and other."""
    rows, launch_of = corr.gpu_rows, corr.launch_of_gpu
    if not len(rows):
        return []
    rank, device, stream = batch.rank[rows], batch.device[rows], batch.stream[rows]
    start = batch.start_ns[rows]
    order = np.lexsort((start, stream, device, rank))
    rows, launch_of = rows[order], launch_of[order]
    rank, device, stream, start = rank[order], device[order], stream[order], start[order]
    end = batch.end_ns[rows]
    launch_start = np.where(launch_of >= 0, batch.start_ns[np.maximum(launch_of, 0)], -1)
    bounds = np.flatnonzero((np.diff(rank) != 0) | (np.diff(device) != 0) | (np.diff(stream) != 0)) + 1
    out: list[StreamIdle] = []
    for lo, hi in zip(np.insert(bounds, 0, 0), np.append(bounds, len(rows))):
        prev_end = end[lo:hi - 1]
        gap = start[lo + 1:hi] - prev_end
        positive = gap > 0
        host = positive & (launch_start[lo + 1:hi] > prev_end)
        kernel = positive & ~host & (gap < consecutive_kernel_delay_ns)
        other = positive & ~host & ~kernel
        span = int(end[lo:hi].max() - start[lo])
        out.append({
            "rank": int(rank[lo]), "device": int(device[lo]), "stream": int(stream[lo]),
            "ops": int(hi - lo), "span_us": span / 1e3,
            "host_wait_us": float(gap[host].sum() / 1e3),
            "kernel_wait_us": float(gap[kernel].sum() / 1e3),
            "other_us": float(gap[other].sum() / 1e3),
        })
    return out


def _pct(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole else 0.0
