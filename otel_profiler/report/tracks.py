"""Timeline tracks: which events a timeline shows and on which track (shared by the HTML report and
the Perfetto writer).

Tracks, per rank in this order: ``Steps``, ``Annotations`` (user annotations of every thread), one
track per CPU thread (CPU ops, runtime/driver calls, Python functions, overheads), one per GPU stream
(kernels, copies, sets, syncs, GPU annotations). Memory samples, instants and the profiler's own span
are left out. Events come sorted by (track, start, longest first), so parents precede children.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cuda_tracer.correlate import correlate
from cuda_tracer.events import EventBatch, Kind
from cuda_tracer.profile import Profile

GPU_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.SYNC, Kind.GPU_USER_ANNOTATION)
HIDDEN_KINDS = (Kind.MEMORY, Kind.INSTANT, Kind.PROFILER)
_STEPS, _ANNOT, _CPU, _GPU = 0, 1, 2, 3


@dataclass
class Track:
    group: str  # host / rank heading
    label: str  # the track's own name
    kind: str  # "steps" | "annotations" | "cpu" | "gpu"
    rank: int
    pid: int  # process (CPU) or device (GPU)
    tid: int  # thread (CPU) or stream (GPU)


@dataclass
class Tracks:
    batch: EventBatch
    rows: np.ndarray  # batch rows shown, in timeline order
    track: np.ndarray  # track index of each shown row
    tracks: list[Track]
    flow_src: np.ndarray  # timeline index of a launch call
    flow_dst: np.ndarray  # timeline index of the GPU op it launched


def _track_keys(batch: EventBatch, rows: np.ndarray) -> np.ndarray:
    """(rank, class, pid-or-device, tid-or-stream) of every row, as an (n, 4) int64 array."""
    kind = batch.kind[rows]
    cls = np.full(len(rows), _CPU, np.int64)
    cls[kind == Kind.STEP] = _STEPS
    cls[kind == Kind.USER_ANNOTATION] = _ANNOT
    gpu = np.isin(kind, np.asarray(GPU_KINDS, np.uint8))
    cls[gpu] = _GPU
    a = np.where(gpu, batch.device[rows], batch.pid[rows])
    b = np.where(gpu, batch.stream[rows], batch.tid[rows])
    a[cls < _CPU], b[cls < _CPU] = 0, 0
    return np.stack([batch.rank[rows].astype(np.int64), cls, a, b], axis=1)


def _describe(profile: Profile, rank: int, cls: int, a: int, b: int) -> Track:
    meta = next((r.meta for r in profile.ranks if r.rank == rank), {})
    host = meta.get("host_name")
    group = f"rank {rank}" + (f" · {host}" if host else "")
    if cls == _STEPS:
        return Track(group, "Steps", "steps", rank, a, b)
    if cls == _ANNOT:
        return Track(group, "Annotations", "annotations", rank, a, b)
    if cls == _GPU:
        return Track(group, f"GPU {a} · stream {b}", "gpu", rank, a, b)
    process = (meta.get("processes") or {}).get(str(a))
    thread = (meta.get("threads") or {}).get(f"{a}/{b}")
    label = f"{process or 'process'} {a} · {thread or 'thread ' + str(b)}"
    return Track(group, label, "cpu", rank, a, b)


def assign_tracks(profile: Profile, batch: EventBatch | None = None) -> Tracks:
    """Every shown event of ``profile`` with its track, and the launch → GPU op links between them."""
    batch = profile.batch() if batch is None else batch
    rows = np.flatnonzero(~np.isin(batch.kind, np.asarray(HIDDEN_KINDS, np.uint8)))
    keys = _track_keys(batch, rows)
    uniq, track = np.unique(keys, axis=0, return_inverse=True)
    track = track.reshape(-1)
    tracks = [_describe(profile, *map(int, k)) for k in uniq]
    order = np.lexsort((batch.start_ns[rows] - batch.end_ns[rows], batch.start_ns[rows], track))
    rows, track = rows[order], track[order]

    corr = correlate(batch)
    position = np.full(len(batch), -1, np.int64)
    position[rows] = np.arange(len(rows))
    linked = corr.launch_of_gpu >= 0
    src = position[corr.launch_of_gpu[linked]]
    dst = position[corr.gpu_rows[linked]]
    keep = (src >= 0) & (dst >= 0)
    return Tracks(batch, rows, track.astype(np.int64), tracks, src[keep], dst[keep])
