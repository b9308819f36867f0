"""A profile: the events of one or more ranks, each with its metadata, and the inputs it comes from.

``cuda_tracer.loading.load_profile`` turns what a user points the tools at into a ``Profile``.
Profile folders hold, per rank, one metadata file
``rank-<r>.json`` and one or more event files ``rank-<r>*.events`` (``EventBatch.save`` format, one per
flush), so ranks never write the same file; ``write_rank`` writes them, ``profile_folder`` reads them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from cuda_tracer.model.events import EventBatch
from cuda_tracer.private_files import make_private_dir, write_in_private_dir


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
    """The ranks read, the inputs they came from, and the rank files refused (unreadable), when
    the loader was asked to go on without them."""

    ranks: list[RankProfile] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    refused: list[TraceError] = field(default_factory=list)

    def batch(self) -> EventBatch:
        """Every rank's events in one batch (the ``rank`` column tells them apart)."""
        if len(self.ranks) == 1:
            return self.ranks[0].batch
        return EventBatch.concat(r.batch for r in self.ranks)


PROFILE_META = "rank-{rank}.json"
PROFILE_EVENTS = "rank-{rank}.{part:05d}.events"


def write_rank(folder: str, rank_profile: RankProfile, part: int = 0) -> str:
    """Write one rank's batch (as part ``part``) and metadata into a profile folder."""
    rank = rank_profile.rank
    make_private_dir(folder)
    events_path = write_in_private_dir(folder, PROFILE_EVENTS.format(rank=rank, part=part),
                                       rank_profile.batch.save, "wb")
    write_in_private_dir(folder, PROFILE_META.format(rank=rank),
                         lambda f: json.dump(rank_profile.meta, f, indent=1, default=str))
    return events_path
