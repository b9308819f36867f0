"""Writes a profile as Chrome trace JSON (the Trace Event Format) that Perfetto UI and
chrome://tracing open: one process per rank and host side / GPU, one thread per track, complete
("X") events in µs, and flow arrows ("s"/"f") from each launch call to its GPU op. Processes are
ordered GPU first; names are demangled, with the recorded (mangled) name in ``args.raw_name``.
"""

from __future__ import annotations

from typing import Any, BinaryIO

import msgspec

from cuda_tracer.model.events import Kind
from cuda_tracer.profile import Profile

from ..names import demangle
from .tracks import assign_tracks

_CATEGORY = {k: k.name.lower() for k in Kind}


def chrome_trace(profile: Profile) -> dict[str, Any]:
    """The profile as a Trace Event Format document (a dict ready for JSON)."""
    t = assign_tracks(profile)
    b, rows = t.batch, t.rows
    # Perfetto groups threads by pid: one process per (rank, CPU side) and per (rank, GPU device).
    pids: dict[tuple, int] = {}
    meta: list[dict] = []
    track_pid = []
    for i, tr in enumerate(t.tracks):
        key = (tr.rank, tr.kind == "gpu", tr.pid if tr.kind == "gpu" else 0)
        if key not in pids:
            pids[key] = len(pids) + 1
            name = f"{tr.group} · GPU {tr.pid}" if tr.kind == "gpu" else f"{tr.group} · host"
            meta.append({"ph": "M", "name": "process_name", "pid": pids[key], "args": {"name": name}})
            meta.append({"ph": "M", "name": "process_sort_index", "pid": pids[key],
                         "args": {"sort_index": pids[key]}})
        track_pid.append(pids[key])
        meta.append({"ph": "M", "name": "thread_name", "pid": pids[key], "tid": i + 1,
                     "args": {"name": tr.label}})
        meta.append({"ph": "M", "name": "thread_sort_index", "pid": pids[key], "tid": i + 1,
                     "args": {"sort_index": i}})
    t0 = int(b.start_ns[rows].min()) if len(rows) else 0
    start = ((b.start_ns[rows] - t0) / 1e3).tolist()
    dur = ((b.end_ns[rows] - b.start_ns[rows]) / 1e3).tolist()
    raw_names = b.names(rows)
    readable = {n: demangle(n) for n in set(raw_names)}
    names = [readable[n] for n in raw_names]
    kinds = b.kind[rows].tolist()
    tracks = t.track.tolist()
    corr_ids = b.correlation[rows].tolist()
    events = meta
    for i in range(len(rows)):
        tr = tracks[i]
        ev = {"ph": "X", "name": names[i], "cat": _CATEGORY[kinds[i]], "ts": start[i], "dur": dur[i],
              "pid": track_pid[tr], "tid": tr + 1}
        if corr_ids[i] >= 0:
            ev["args"] = {"correlation": corr_ids[i]}
        if names[i] != raw_names[i]:
            ev.setdefault("args", {})["raw_name"] = raw_names[i]
        events.append(ev)
    for n, (s, d) in enumerate(zip(t.flow_src.tolist(), t.flow_dst.tolist())):
        events.append({"ph": "s", "id": n, "name": "launch", "cat": "launch", "ts": start[s],
                       "pid": track_pid[tracks[s]], "tid": tracks[s] + 1})
        events.append({"ph": "f", "bp": "e", "id": n, "name": "launch", "cat": "launch",
                       "ts": start[d], "pid": track_pid[tracks[d]], "tid": tracks[d] + 1})
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"generator": "otel-profiler", "t0_unix_ns": t0}}


def chrome_trace_bytes(profile: Profile) -> bytes:
    """The Trace Event Format document as JSON bytes."""
    return msgspec.json.encode(chrome_trace(profile))


def write_chrome_trace(profile: Profile, out: BinaryIO) -> None:
    out.write(chrome_trace_bytes(profile))
