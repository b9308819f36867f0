"""Timeline tracks: which events a timeline shows and on which track (shared by the HTML report and
the Perfetto writer).

Tracks, per rank in this order, so a timeline opens on the GPU: one per GPU stream (kernels, copies,
sets, syncs, GPU annotations), ``Steps``, ``Annotations`` (user annotations of every thread), one
track per CPU thread (CPU ops, runtime/driver calls, Python functions, overheads; ``collapsed``: a
viewer shows only their outermost events until asked). Memory samples, instants and the profiler's
own span are left out. Events come sorted by (track, start, longest first), so parents precede
children.

Labels name what is known and say what is not: ``GPU 0 · stream 7``, ``GPU 0 · stream not
recorded``, ``pt_main_thread 1102`` (Kineto's thread names), ``main thread 6583``,
``Profiler overhead`` (Kineto's overhead events, which carry no process id).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from cuda_tracer.model.correlate import correlate
from cuda_tracer.model.events import EventBatch, Kind
from cuda_tracer.profile import Profile
from ..analysis.stats import unique_rows

GPU_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.SYNC, Kind.GPU_USER_ANNOTATION)
HIDDEN_KINDS = (Kind.MEMORY, Kind.INSTANT, Kind.PROFILER)
_GPU, _STEPS, _ANNOT, _CPU = 0, 1, 2, 3
_STREAM_UNKNOWN = (-1, 2**32 - 1)  # -1, or Kineto's (uint32) -1
_THREAD_NAME = re.compile(r"^thread \S+ \((.+)\)$")


@dataclass
class Track:
    group: str  # host / rank heading
    label: str  # the track's own name
    kind: str  # "steps" | "annotations" | "cpu" | "gpu"
    rank: int
    pid: int  # process (CPU) or device (GPU)
    tid: int  # thread (CPU) or stream (GPU)
    collapsed: bool = False  # a viewer opens it showing only its outermost events


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
    steps_or_annotations = (cls == _STEPS) | (cls == _ANNOT)
    a[steps_or_annotations], b[steps_or_annotations] = 0, 0
    return np.stack([batch.rank[rows].astype(np.int64), cls, a, b], axis=1)


def _describe(profile: Profile, rank: int, cls: int, a: int, b: int, overhead_only: bool = False,
              several_processes: bool = False) -> Track:
    meta = next((r.meta for r in profile.ranks if r.rank == rank), {})
    host = meta.get("host_name")
    source = meta.get("file") or meta.get("source_file") or meta.get("source")
    group = f"rank {rank}" + (f" · {host}" if host else "") + \
        (f" · {source}" if source and len(profile.ranks) > 1 else "")
    if cls == _STEPS:
        return Track(group, "Steps", "steps", rank, a, b)
    if cls == _ANNOT:
        return Track(group, "Annotations", "annotations", rank, a, b)
    if cls == _GPU:
        device = f"GPU {a}" if a >= 0 else "GPU (device not recorded)"
        stream = "stream not recorded" if b in _STREAM_UNKNOWN else f"stream {b}"
        return Track(group, f"{device} · {stream}", "gpu", rank, a, b)
    if overhead_only:
        return Track(group, "Profiler overhead", "cpu", rank, a, b, collapsed=True)
    thread = (meta.get("threads") or {}).get(f"{a}/{b}") or ""
    named = _THREAD_NAME.match(thread)
    name = named.group(1) if named else thread
    if a < 0:
        label = f"thread {b} (process not recorded)"
    elif name:
        label = f"{name} {b}"
    else:
        label = f"main thread {b}" if a == b else f"thread {b}"
    if several_processes and a >= 0:
        label = f"pid {a} · {label}"
    return Track(group, label, "cpu", rank, a, b, collapsed=True)


def assign_tracks(profile: Profile, batch: EventBatch | None = None) -> Tracks:
    """Every shown event of ``profile`` with its track, and the launch → GPU op links between them."""
    batch = profile.batch() if batch is None else batch
    rows = np.flatnonzero(~np.isin(batch.kind, np.asarray(HIDDEN_KINDS, np.uint8)))
    uniq, track = unique_rows(_track_keys(batch, rows))
    overhead = np.ones(len(uniq), bool)
    overhead[track[batch.kind[rows] != Kind.OVERHEAD]] = False
    cpu_pids: dict[int, set] = {}
    for k in uniq[(uniq[:, 1] == _CPU) & (uniq[:, 2] >= 0)].tolist():
        cpu_pids.setdefault(k[0], set()).add(k[2])
    tracks = [_describe(profile, int(k[0]), int(k[1]), int(k[2]), int(k[3]),
                        overhead_only=bool(overhead[i]) and k[1] == _CPU,
                        several_processes=len(cpu_pids.get(int(k[0]), ())) > 1)
              for i, k in enumerate(uniq)]
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
