"""A profile: the events of one or more ranks, each with its metadata, and the inputs it comes from.

``load_profile`` accepts what a user points the tools at: a trace file, a folder of per-rank trace
files, or a profile folder written by a live run. Profile folders hold, per rank, one metadata file
``rank-<r>.json`` and one or more event files ``rank-<r>*.events`` (``EventBatch.save`` format, one per
flush), so ranks never write the same file.
"""

from __future__ import annotations

import glob
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from .events import EventBatch


class TraceError(ValueError):
    """Unusable input: carries the path and what is wrong with it, for one clear error line."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


@dataclass
class RankProfile:
    """The events of one rank (one process, one trace file) with what is known about where they ran."""

    meta: dict[str, Any]
    batch: EventBatch

    @property
    def rank(self) -> int:
        return int(self.meta.get("rank", -1))


@dataclass
class Profile:
    ranks: list[RankProfile] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)

    def batch(self) -> EventBatch:
        """Every rank's events in one batch (the ``rank`` column tells them apart)."""
        if len(self.ranks) == 1:
            return self.ranks[0].batch
        return EventBatch.concat(r.batch for r in self.ranks)


PROFILE_META = "rank-{rank}.json"
PROFILE_EVENTS = "rank-{rank}.{part:05d}.events"
_EVENTS_FILE = re.compile(r"^rank-(-?\d+)\..*events$")


def is_profile_folder(path: str) -> bool:
    return os.path.isdir(path) and any(_EVENTS_FILE.match(n) for n in os.listdir(path))


def write_rank(folder: str, rank_profile: RankProfile, part: int = 0) -> str:
    """Write one rank's batch (as part ``part``) and metadata into a profile folder."""
    rank = rank_profile.rank
    os.makedirs(folder, mode=0o700, exist_ok=True)
    events_path = os.path.join(folder, PROFILE_EVENTS.format(rank=rank, part=part))
    tmp = events_path + ".tmp"
    rank_profile.batch.save(tmp)
    os.replace(tmp, events_path)
    meta_path = os.path.join(folder, PROFILE_META.format(rank=rank))
    with open(meta_path + ".tmp", "w") as f:
        json.dump(rank_profile.meta, f, indent=1, default=str)
    os.replace(meta_path + ".tmp", meta_path)
    return events_path


def read_profile_folder(folder: str) -> list[RankProfile]:
    by_rank: dict[int, list[str]] = {}
    for name in sorted(os.listdir(folder)):
        m = _EVENTS_FILE.match(name)
        if m:
            by_rank.setdefault(int(m.group(1)), []).append(os.path.join(folder, name))
    ranks = []
    for rank, files in sorted(by_rank.items()):
        batches = []
        for path in files:
            try:
                batches.append(EventBatch.load(path))
            except ValueError as exc:
                raise TraceError(path, str(exc)) from None
        meta_path = os.path.join(folder, PROFILE_META.format(rank=rank))
        meta: dict[str, Any] = {"rank": rank}
        if os.path.exists(meta_path):
            try:
                with open(meta_path) as f:
                    meta = json.load(f)
            except (OSError, json.JSONDecodeError) as exc:
                raise TraceError(meta_path, f"unreadable profile metadata ({exc})") from None
        ranks.append(RankProfile(meta=meta, batch=EventBatch.concat(batches)))
    return ranks


def load_profile(paths: Iterable[str]) -> Profile:
    """Load trace files, folders of trace files, profile folders and TensorFlow profiles (``.xplane.pb``,
    a run folder or a TF logdir) into one profile.

    Raises ``TraceError`` naming the first unusable input.
    """
    from .trace_files import is_trace_file, read_trace  # trace_files imports this module
    from .xplane import XPLANE_SUFFIX, read_xplane, xplane_files  # so does xplane

    profile = Profile()
    for path in paths:
        if os.path.isdir(path):
            if is_profile_folder(path):
                profile.ranks.extend(read_profile_folder(path))
                profile.sources.append(path)
                continue
            files = sorted(p for p in glob.glob(os.path.join(path, "*")) if is_trace_file(p))
            read = read_trace
            if not files:  # a TensorFlow profiler logdir or run folder
                files, read = xplane_files(path), read_xplane
            if not files:
                raise TraceError(path, "folder holds no trace files (*.json, *.json.gz), "
                                       "no TensorFlow profile (*.xplane.pb) and no otel-profiler profile")
            for f in files:
                profile.ranks.append(read(f))
                profile.sources.append(f)
        elif not os.path.exists(path):
            raise TraceError(path, "no such file or folder")
        elif path.endswith(XPLANE_SUFFIX):
            profile.ranks.append(read_xplane(path))
            profile.sources.append(path)
        else:
            profile.ranks.append(read_trace(path))
            profile.sources.append(path)
    _number_unranked(profile.ranks)
    return profile


def _number_unranked(ranks: list[RankProfile]) -> None:
    """Ranks without ``distributedInfo`` get the next free number, so each rank stays distinct."""
    used = {r.rank for r in ranks if r.rank >= 0}
    nxt = 0
    for r in ranks:
        if r.rank < 0:
            while nxt in used:
                nxt += 1
            r.meta["rank"] = nxt
            used.add(nxt)
            if len(r.batch):
                r.batch.columns["rank"][:] = nxt
