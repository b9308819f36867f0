"""Ranks' clocks aligned from collective kernels that end together.

A collective (NCCL/RCCL all-reduce, all-gather, send/receive, ...) ends on every rank at nearly the
same moment: no rank leaves it before the last one has arrived and the data has moved. The k-th
collective of a given name on one rank is matched with the k-th of that name on the reference rank
(the lowest rank number), by end time; a rank's offset is the median of the differences of the
matched ends, and its uncertainty the spread of those differences (1.4826 times their median
absolute deviation, the standard deviation for normal noise), or ``None`` with fewer than
``MIN_MATCHED`` collectives. Subtracting a rank's offset from its times puts them on the reference
rank's clock. Ranks without collectives (or none matched) keep their clocks, and say so.
"""

from __future__ import annotations

from typing import Any, TypedDict

import numpy as np

MIN_MATCHED = 3
"""Fewer matched collectives than this give an offset without an uncertainty."""


class RankOffset(TypedDict):
    """A rank's clock offset from the reference rank's, its uncertainty (None with fewer than
    ``MIN_MATCHED`` collectives) and the collectives matched."""

    offset_us: float
    uncertainty_us: float | None
    matched: int


class ClockAlignment(TypedDict):
    """The cluster document's ``clock_alignment``: per rank (key: the rank as text) its offset;
    ``aligned``: whether any offset was found."""

    reference_rank: int | None
    aligned: bool
    ranks: dict[str, RankOffset]
    note: str


def _ends_by_name(c: dict[str, Any]) -> dict[str, np.ndarray]:
    names, index, ends = c["names"], np.asarray(c["name"]), np.asarray(c["end_ns"])
    return {n: ends[index == i] for i, n in enumerate(names)}


def clock_offsets(collectives: dict[int, dict[str, Any]]) -> ClockAlignment:
    """``{reference_rank, aligned, ranks: {rank: {offset_us, uncertainty_us, matched}}, note}`` from
    each rank's collectives (``rank_steps.collectives``); ``aligned``: whether any offset was found."""
    if not collectives:
        return {"reference_rank": None, "aligned": False, "ranks": {},
                "note": "no ranks: clocks left as recorded"}
    with_comm = sorted(r for r, c in collectives.items() if len(c["end_ns"]))
    ranks: dict[str, RankOffset] = {}
    if not with_comm:
        for r in sorted(collectives):
            ranks[str(r)] = {"offset_us": 0.0, "uncertainty_us": None, "matched": 0}
        return {"reference_rank": None, "aligned": False, "ranks": ranks,
                "note": "no collective kernels in these traces: each rank keeps its own clock "
                        "(cross-rank times may differ by the hosts' clock offsets)"}
    reference = with_comm[0]
    ref = _ends_by_name(collectives[reference])
    unaligned = []
    for r in sorted(collectives):
        diffs = []
        for name, ends in _ends_by_name(collectives[r]).items():
            theirs = ref.get(name)
            if theirs is not None:
                n = min(len(ends), len(theirs))
                diffs.append(ends[:n].astype(np.int64) - theirs[:n].astype(np.int64))
        d = np.concatenate(diffs) if diffs else np.zeros(0, np.int64)
        if not len(d):
            unaligned.append(r)
            ranks[str(r)] = {"offset_us": 0.0, "uncertainty_us": None, "matched": 0}
            continue
        offset = float(np.median(d))
        spread = 1.4826 * float(np.median(np.abs(d - offset))) if len(d) >= MIN_MATCHED else None
        ranks[str(r)] = {"offset_us": offset / 1e3,
                         "uncertainty_us": None if spread is None else spread / 1e3, "matched": int(len(d))}
    note = f"clocks aligned to rank {reference}'s by the ends of collective kernels"
    if unaligned:
        note += (f"; {len(unaligned)} rank(s) without matching collectives keep their own clocks: "
                 + ", ".join(map(str, unaligned[:20])) + ("…" if len(unaligned) > 20 else ""))
    return {"reference_rank": reference, "aligned": True, "ranks": ranks, "note": note}


def offset_ns(alignment: ClockAlignment, rank: int) -> int:
    """What to subtract from a rank's times to put them on the reference clock."""
    row = alignment["ranks"].get(str(rank))
    return int(round(row["offset_us"] * 1e3)) if row else 0
