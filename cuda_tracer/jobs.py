"""Which ranks belong to one job: several trace files are summarized as the ranks of one job only
when they can be.

A rank is the rank its trace states (``distributedInfo.rank``, else a ``rank-N`` in the file name,
else the next free number). Ranks are the same job when all of these hold:

- no two of them have the same rank;
- the world sizes they state are equal, and each rank is below it;
- they ran at the same time: each rank's events lie within ``JOB_GAP_NS`` (5 minutes) of the
  others' (the ranks of a job profile the same steps together; unrelated traces were recorded at
  different times). Traces with relative timestamps cannot be told apart this way.

``split_jobs`` groups ranks into jobs by these rules (greedily, in order of their first event);
``check_one_job`` raises a ``TraceError`` naming the first file that does not fit.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import cast

from cuda_tracer.model.events import MISSING
from cuda_tracer.profile import Profile, RankProfile, TraceError

JOB_GAP_NS = 5 * 60 * 10**9


@dataclass
class _Job:
    ranks: list[RankProfile] = field(default_factory=list)
    world_size: int = MISSING
    start_ns: int | None = None
    end_ns: int | None = None
    files: dict[str, RankProfile] = field(default_factory=dict)
    """The first rank added from each file (by real path): finding one is not a walk over all."""
    numbers: dict[int, RankProfile] = field(default_factory=dict)
    """The first rank added with each rank number."""


def _window(rank: RankProfile) -> tuple[int, int] | None:
    batch = rank.batch
    if not len(batch):
        return None
    return int(batch.start_ns.min()), int(batch.end_ns.max())


def _world_size(rank: RankProfile) -> int:
    value = rank.meta.get("world_size", MISSING)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else MISSING


def name_of(rank: RankProfile) -> str:
    """The file a rank came from, as a person reads it."""
    return str(rank.meta.get("file") or rank.meta.get("source") or f"rank {rank.rank}")


def _misfit(job: _Job, rank: RankProfile) -> str | None:
    """Why ``rank`` is not part of ``job``, or None when it is."""
    world = _world_size(rank)
    if world != MISSING and rank.rank >= world:
        return f"its rank {rank.rank} is not below its world size {world}"
    file = _real_file(rank)
    if file is not None and file in job.files:
        return "it is given twice"
    same = job.numbers.get(rank.rank)
    if same is not None:
        return f"it has the same rank ({rank.rank}) as {name_of(same)}"
    if world != MISSING and job.world_size != MISSING and world != job.world_size:
        other = next(r for r in job.ranks if _world_size(r) == job.world_size)
        return f"its world size is {world}, that of {name_of(other)} is {job.world_size}"
    window = _window(rank)
    if window is not None and job.start_ns is not None and job.end_ns is not None:  # (set together)
        start, end = window
        if start > job.end_ns + JOB_GAP_NS or end < job.start_ns - JOB_GAP_NS:
            gap_s = (start - job.end_ns if start > job.end_ns else job.start_ns - end) / 1e9
            return (f"it was recorded {_duration(gap_s)} apart from {name_of(job.ranks[0])} "
                    "(the ranks of one job run at the same time)")
    return None


def _duration(seconds: float) -> str:
    for unit, size in (("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


def _add(job: _Job, rank: RankProfile) -> None:
    job.ranks.append(rank)
    file = _real_file(rank)
    if file is not None:
        job.files.setdefault(file, rank)
    job.numbers.setdefault(rank.rank, rank)
    if _world_size(rank) != MISSING:
        job.world_size = _world_size(rank)
    window = _window(rank)
    if window is not None:
        job.start_ns = window[0] if job.start_ns is None else min(job.start_ns, window[0])
        job.end_ns = window[1] if job.end_ns is None else max(job.end_ns, window[1])


def _group(ranks: list[RankProfile]) -> tuple[list[_Job], list[tuple[RankProfile, str]]]:
    """Jobs, and for each rank that opened a new job, why it did not fit the first one."""
    jobs: list[_Job] = []
    misfits: list[tuple[RankProfile, str]] = []
    by_time = sorted(ranks, key=lambda r: (_window(r) or (0, 0))[0])
    for rank in by_time:
        reasons = [_misfit(job, rank) for job in jobs]
        for job, reason in zip(jobs, reasons):
            if reason is None:
                _add(job, rank)
                break
        else:
            if jobs:
                misfits.append((rank, cast(str, reasons[0])))  # not None: it would have fitted
            jobs.append(_Job())
            _add(jobs[-1], rank)
    return jobs, misfits


def split_jobs(profile: Profile) -> list[Profile]:
    """The profile's ranks grouped into jobs (see the module docstring), each a ``Profile`` whose
    ranks keep their input order; the jobs in order of their first rank's input position."""
    order = {id(r): i for i, r in enumerate(profile.ranks)}
    jobs, _ = _group(profile.ranks)
    out = []
    for job in sorted(jobs, key=lambda j: min(order[id(r)] for r in j.ranks)):
        ranks = sorted(job.ranks, key=lambda r: order[id(r)])
        files = {name_of(r) for r in ranks}
        sources = [s for s in profile.sources if s in files or
                   any(f.startswith(s.rstrip(os.sep) + os.sep) for f in files)]
        out.append(Profile(ranks=ranks, sources=sources or sorted(files)))
    return out


def check_one_job(profile: Profile) -> None:
    """Raise ``TraceError`` naming the first file that is not part of the same job as the others."""
    _, misfits = _group(profile.ranks)
    if misfits:
        rank, reason = misfits[0]
        raise TraceError(name_of(rank), f"not part of the same job as the other traces: {reason}; "
                                        "`summary --separate` summarizes each job on its own")


def _real_file(rank: RankProfile) -> str | None:
    """The real path of the file a rank was read from; None when it names none."""
    file = rank.meta.get("file")
    return os.path.realpath(file) if isinstance(file, str) else None
