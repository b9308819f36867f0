"""A profile: the events of one or more ranks, each with its metadata, and the inputs it comes from.

``cuda_tracer.loading.load_profile`` turns what a user points the tools at into a ``Profile``.
Profile folders hold, per rank, one metadata file
``rank-<r>.json`` and one or more event files ``rank-<r>*.events`` (``EventBatch.save`` format, one per
flush), so ranks never write the same file.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from .events import EventBatch
from .private_files import make_private_dir, open_private


class TraceError(ValueError):
    """Unusable input: carries the path and what is wrong with it, for one clear error line."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem

    def __reduce__(self) -> tuple:  # pickles (a reader process hands it back) with both parts
        return (TraceError, (self.path, self.problem))


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
    make_private_dir(folder)
    events_path = os.path.join(folder, PROFILE_EVENTS.format(rank=rank, part=part))
    tmp = events_path + ".tmp"
    with open_private(tmp, "wb") as f:
        rank_profile.batch.save(f)
    os.replace(tmp, events_path)
    meta_path = os.path.join(folder, PROFILE_META.format(rank=rank))
    with open_private(meta_path + ".tmp", "w") as f:
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
