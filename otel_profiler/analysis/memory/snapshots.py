"""CUDA memory snapshots in a profile folder (``memory-snapshot.rank-<r>.<reason>.pickle``, written by
``live.cuda_memory``; the format of ``torch.cuda.memory._snapshot()``, which
https://pytorch.org/memory_viz opens).

A snapshot is read with an unpickler that builds only plain values (dict, list, str, numbers): a
file that asks for any class or function is refused, never executed. Per file: the segments the
caching allocator holds (``total_size``), the bytes allocated and active in them, the largest
allocated blocks with their innermost Python frame, and the history events recorded
(``device_traces``)."""

from __future__ import annotations

import glob
import io
import os
import pickle
import re
from typing import Any

from ..summary_schema.sections import Snapshot, SnapshotFigures

SNAPSHOT_GLOB = "memory-snapshot.rank-*.pickle"
_NAME = re.compile(r"memory-snapshot\.rank-(-?\d+)\.(\w+)\.pickle$")
LARGEST = 5
MAX_BYTES = 512 * 2**20  # a bigger file is listed, not read


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused to load {module}.{name}: a snapshot holds plain values only")


def read_snapshot(path: str) -> Any:
    with open(path, "rb") as f:
        return _PlainUnpickler(io.BytesIO(f.read())).load()


def _frame(block: dict) -> str | None:
    frames = block.get("frames") or []
    for f in frames:  # innermost first; skip the allocator's own frames
        if isinstance(f, dict) and "torch/" not in str(f.get("filename", "")):
            return f"{f.get('filename')}:{f.get('line')} {f.get('name')}"
    return None


def summarize_snapshot(snapshot: Any, largest: int = LARGEST) -> SnapshotFigures:
    """``{segments, reserved_bytes, allocated_bytes, active_bytes, history_events, devices,
    largest_blocks: [{bytes, device, frame}]}``."""
    if not isinstance(snapshot, dict) or not isinstance(snapshot.get("segments"), list):
        raise ValueError("not a torch.cuda memory snapshot (no segments list)")
    segments = [s for s in snapshot["segments"] if isinstance(s, dict)]
    blocks = [(b, s.get("device")) for s in segments for b in s.get("blocks") or []
              if isinstance(b, dict) and b.get("state") == "active_allocated"]
    blocks.sort(key=lambda bd: -int(bd[0].get("size") or 0))
    traces = snapshot.get("device_traces") or []
    return {"segments": len(segments),
            "reserved_bytes": sum(int(s.get("total_size") or 0) for s in segments),
            "allocated_bytes": sum(int(s.get("allocated_size") or 0) for s in segments),
            "active_bytes": sum(int(s.get("active_size") or 0) for s in segments),
            "devices": sorted({device for s in segments if isinstance(device := s.get("device"), int)}),
            "history_events": sum(len(t) for t in traces if isinstance(t, list)),
            "largest_blocks": [{"bytes": int(b.get("size") or 0), "device": d, "frame": _frame(b)}
                               for b, d in blocks[:largest]]}


def snapshots_in(sources: list[str]) -> list[Snapshot]:
    """Every snapshot file of the profile folders among ``sources``, summarized; a file that cannot
    be read is listed with its ``error``."""
    out = []
    for folder in sources:
        if not os.path.isdir(folder):
            continue
        for path in sorted(glob.glob(os.path.join(folder, SNAPSHOT_GLOB))):
            m = _NAME.search(os.path.basename(path))
            entry: Snapshot = {"file": os.path.basename(path), "bytes": os.path.getsize(path),
                                     "rank": int(m.group(1)) if m else None, "reason": m.group(2) if m else None}
            try:
                if entry["bytes"] > MAX_BYTES:
                    raise ValueError(f"larger than {MAX_BYTES // 2**20} MiB; open it in pytorch.org/memory_viz")
                entry.update(summarize_snapshot(read_snapshot(path)))
            except (OSError, ValueError, pickle.UnpicklingError, EOFError, TypeError, AttributeError,
                    IndexError, KeyError, MemoryError) as exc:
                entry["error"] = str(exc) or type(exc).__name__
            out.append(entry)
    return out
