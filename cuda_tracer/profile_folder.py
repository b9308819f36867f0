"""Reads profile folders written by a live run (``profile.write_rank``): per rank, a metadata file
``rank-<r>.json`` and one or more event files ``rank-<r>.<part>.events``.

Every file is checked before it is used: only regular files are read, the metadata must be a JSON
object whose known fields have their types (``rank`` an integer equal to the file name's), and the
event files must be readable event batches. A rank with any unusable file is one ``TraceError``
naming that file; ``read_profile_folder`` returns it in the rank's place, so a caller can report it
and still use the other ranks.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from cuda_tracer.model.events import EventBatch
from cuda_tracer.profile import PROFILE_META, RankProfile, TraceError
from cuda_tracer.trace_input import open_regular

EVENTS_FILE = re.compile(r"^rank-(-?\d+)\..*events$")
MAX_META_BYTES = 16 << 20  # a rank's metadata is a few kB; anything this large is not one

_INT, _STR, _DICT, _LIST = (int,), (str,), (dict,), (list,)
# The metadata fields the tools read, with their JSON types (None is allowed for all but rank).
META_TYPES: dict[str, tuple[type, ...]] = {
    "rank": _INT, "world_size": _INT, "local_rank": _INT, "pid": _INT, "steps": _INT,
    "skipped_events": _INT, "flow_events": _INT,
    "source": _STR, "file": _STR, "format": _STR, "host_name": _STR, "run_id": _STR,
    "framework": _STR, "service_name": _STR, "detailed_capture": _STR,
    "resource": _DICT, "versions": _DICT, "processes": _DICT, "threads": _DICT, "distributed": _DICT,
    "device_properties": _LIST, "activities": _LIST, "windows": _LIST, "profiler_window_ns": _LIST,
}


def is_profile_folder(path: str) -> bool:
    """A folder holding at least one ``rank-<r>.*events`` file. Raises ``TraceError`` when the
    folder cannot be listed."""
    return os.path.isdir(path) and any(EVENTS_FILE.match(n) for n in _listing(path))


def _listing(folder: str) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except OSError as exc:
        raise TraceError(folder, f"cannot list folder ({exc.strerror or exc})") from None


def read_profile_folder(folder: str) -> list[RankProfile | TraceError]:
    """Each rank of the folder, in rank order: its ``RankProfile``, or the ``TraceError`` naming
    the first unusable file of that rank."""
    by_rank: dict[int, list[str]] = {}
    for name in _listing(folder):
        m = EVENTS_FILE.match(name)
        if m:
            by_rank.setdefault(int(m.group(1)), []).append(os.path.join(folder, name))
    out: list[RankProfile | TraceError] = []
    for rank, files in sorted(by_rank.items()):
        try:
            out.append(_read_rank(folder, rank, files))
        except TraceError as exc:
            out.append(exc)
    return out


def _read_rank(folder: str, rank: int, files: list[str]) -> RankProfile:
    batches = []
    for path in files:
        with open_regular(path) as f:
            try:
                batches.append(EventBatch.load(f))
            except ValueError as exc:
                raise TraceError(path, str(exc)) from None
    meta_path = os.path.join(folder, PROFILE_META.format(rank=rank))
    meta: dict[str, Any] = read_meta(meta_path, rank) if os.path.lexists(meta_path) else {"rank": rank}
    meta["file"] = meta_path if os.path.lexists(meta_path) else files[0]
    batch = EventBatch.concat(batches)
    if len(batch):
        batch.columns["rank"][:] = rank
    return RankProfile(meta=meta, batch=batch)


def read_meta(path: str, rank: int) -> dict[str, Any]:
    """A rank's metadata file, checked (see the module docstring). Raises ``TraceError``."""
    with open_regular(path) as f:
        try:
            text = f.read(MAX_META_BYTES + 1)
        except OSError as exc:
            raise TraceError(path, f"cannot read ({exc.strerror or exc})") from None
    if len(text) > MAX_META_BYTES:
        raise TraceError(path, f"profile metadata larger than {MAX_META_BYTES >> 20} MiB: "
                               "not a rank's metadata")
    try:
        meta = json.loads(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError
        raise TraceError(path, f"unreadable profile metadata ({exc})") from None
    if not isinstance(meta, dict):
        raise TraceError(path, f"profile metadata is not a JSON object (it is {_json_type(meta)})")
    for key, types in META_TYPES.items():
        value = meta.get(key)
        if key not in meta:
            continue
        if value is None and key != "rank":
            if types in (_DICT, _LIST):
                del meta[key]  # a null list or object reads as an absent one
            continue
        if not isinstance(value, types) or (types is _INT and isinstance(value, bool)):
            raise TraceError(path, f"profile metadata field {key!r} should be "
                                   f"{_json_type(types[0]())}, not {_json_type(value)} ({_short(value)})")
    if "rank" in meta and meta["rank"] != rank:
        raise TraceError(path, f"profile metadata says rank {meta['rank']}, the file name rank {rank}")
    meta["rank"] = rank
    return meta


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."
