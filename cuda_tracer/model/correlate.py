"""Links GPU work to the CPU calls that caused it, and derives launch delay, launch latency and queue depth.

Definitions (stated here, next to the code):

- A GPU op (kernel, memcpy, memset) is linked to its launching runtime/driver call by equal CUPTI
  correlation id within one rank. GPU ops with no such call are *orphans* (typically launched before
  the profiling window opened); they are counted, never silently dropped.
- A launch call is linked to the CPU op that issued it by equal external id (Kineto's ``External id``).
- **Launch delay** (Holistic Trace Analysis): ``gpu.start - (launch.start + launch.duration)``, clipped
  at 0. It includes time the op waited in the stream queue behind earlier work.
- **Launch latency** (NVIDIA Nsight Systems): ``gpu.start - launch.start``, from the beginning of the
  launch API call to the beginning of execution.
- **Queue depth** of a stream (HTA): +1 at the start of each launch call that has a GPU op on that
  stream, -1 when that op starts running; orphans do not count.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cuda_tracer.model.events import GPU_OP_KINDS, LAUNCH_KINDS, MISSING, EventBatch, Kind, kinds_in

_KEY_SHIFT = 40  # correlation ids stay far below 2**40; the rank goes in the bits above


@dataclass
class StreamQueue:
    rank: int
    device: int
    stream: int
    times_ns: np.ndarray  # when the depth changed
    depth: np.ndarray  # depth from that time on

    @property
    def max_depth(self) -> int:
        return int(self.depth.max()) if len(self.depth) else 0


@dataclass
class Correlation:
    gpu_rows: np.ndarray  # rows of GPU ops in the batch
    launch_of_gpu: np.ndarray  # for each GPU op: row of its launch call, or -1 (orphan)
    delay_ns: np.ndarray  # launch delay per GPU op (MISSING for orphans)
    latency_ns: np.ndarray  # launch latency per GPU op (MISSING for orphans)
    launch_rows: np.ndarray  # rows of runtime/driver calls
    op_of_launch: np.ndarray  # for each launch call: row of the CPU op that issued it, or -1

    @property
    def matched(self) -> np.ndarray:
        return self.launch_of_gpu >= 0

    @property
    def orphan_count(self) -> int:
        return int((self.launch_of_gpu < 0).sum())


def _keys(batch: EventBatch, rows: np.ndarray, column: str) -> np.ndarray:
    return (batch.rank[rows].astype(np.int64) << _KEY_SHIFT) | batch.columns[column][rows]


def _lookup(keys: np.ndarray, table_keys: np.ndarray, table_rows: np.ndarray) -> np.ndarray:
    """For each key, the row in ``table_rows`` with an equal key (the first one), or -1."""
    if not len(table_keys) or not len(keys):
        return np.full(len(keys), -1, np.int64)
    order = np.argsort(table_keys, kind="stable")
    sorted_keys = table_keys[order]
    pos = np.searchsorted(sorted_keys, keys)
    pos_clipped = np.minimum(pos, len(sorted_keys) - 1)
    found = sorted_keys[pos_clipped] == keys
    return np.where(found, table_rows[order[pos_clipped]], -1)


def correlate(batch: EventBatch) -> Correlation:
    kind = batch.kind
    gpu_rows = np.flatnonzero(kinds_in(kind, GPU_OP_KINDS))
    launch_rows = np.flatnonzero(kinds_in(kind, LAUNCH_KINDS))

    with_corr = launch_rows[batch.correlation[launch_rows] != MISSING]
    launch_of_gpu = _lookup(_keys(batch, gpu_rows, "correlation"),
                            _keys(batch, with_corr, "correlation"), with_corr)
    launch_of_gpu[batch.correlation[gpu_rows] == MISSING] = -1

    matched = launch_of_gpu >= 0
    delay = np.full(len(gpu_rows), MISSING, np.int64)
    latency = np.full(len(gpu_rows), MISSING, np.int64)
    gpu_start = batch.start_ns[gpu_rows[matched]]
    launches = launch_of_gpu[matched]
    latency[matched] = gpu_start - batch.start_ns[launches]
    delay[matched] = np.maximum(gpu_start - batch.end_ns[launches], 0)

    op_rows = np.flatnonzero((kind == Kind.CPU_OP) & (batch.external_id != MISSING))
    op_of_launch = _lookup(_keys(batch, launch_rows, "external_id"),
                           _keys(batch, op_rows, "external_id"), op_rows)
    op_of_launch[batch.external_id[launch_rows] == MISSING] = -1
    return Correlation(gpu_rows, launch_of_gpu, delay, latency, launch_rows, op_of_launch)


def queue_depths(batch: EventBatch, corr: Correlation) -> list[StreamQueue]:
    """The queue-depth step function of every (rank, device, stream) that has linked GPU ops."""
    matched = corr.matched
    rows = corr.gpu_rows[matched]
    launches = corr.launch_of_gpu[matched]
    if not len(rows):
        return []
    rank, device, stream = batch.rank[rows], batch.device[rows], batch.stream[rows]
    group = np.lexsort((stream, device, rank))
    rank, device, stream = rank[group], device[group], stream[group]
    rows, launches = rows[group], launches[group]
    boundaries = np.flatnonzero((np.diff(rank) != 0) | (np.diff(device) != 0) |
                                (np.diff(stream) != 0)) + 1
    out = []
    for lo, hi in zip(np.insert(boundaries, 0, 0), np.append(boundaries, len(rows))):
        times = np.concatenate([batch.start_ns[launches[lo:hi]], batch.start_ns[rows[lo:hi]]])
        steps = np.concatenate([np.ones(hi - lo, np.int64), -np.ones(hi - lo, np.int64)])
        # At equal times an op start (-1) is applied before a launch (+1), so depth never overshoots.
        order = np.lexsort((steps, times))
        out.append(StreamQueue(int(rank[lo]), int(device[lo]), int(stream[lo]),
                               times[order], np.cumsum(steps[order])))
    return out
