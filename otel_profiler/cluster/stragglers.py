"""Stragglers explained: per step, the slowest ranks and why, from each rank's per-step figures
(``rank_steps.step_figures``) and its collectives on the aligned clocks (``align``).

In a synchronous job every rank's step lasts about as long (the collectives hold the fast ones
back), so a rank's *own work* in a step is its step time less its communication time: a straggler
does more own work, and the others wait for it inside their collectives. For each step, ranks are
ranked by own work; one at least ``StragglerThresholds.excess_pct`` over the step's median is a
straggler, and its cause is the part of its step that exceeds the step's median the most:

- ``compute``: compute kernel time;
- ``communication wait``: time in collective kernels (a slow link or a peer it waits on);
- ``data loading``: DataLoader ``__next__`` time;
- ``host/launch-bound``: GPU idle time while the host was busy (launching, in Python or operators);
- ``stalled``: GPU idle time while the host was idle too (waiting on something outside the trace).

The collective-wait table gives per rank how long it sat in collectives before the last rank
arrived (start times on the aligned clocks) and how often it was that last rank.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, TypedDict

import numpy as np

from ..analysis.insights.thresholds import markdown_table, parse_thresholds, threshold
from ..analysis.insights.thresholds import thresholds_doc as documented_thresholds
from .align import ClockAlignment, offset_ns


@dataclass(frozen=True)
class StragglerThresholds:
    """The thresholds of the straggler analysis; each field's metadata holds its unit and help text
    (``analysis.insights.thresholds``), from which ``--help`` and docs/cluster.md list them."""

    excess_pct: float = threshold(
        10.0, "%", "a rank is a straggler in a step when its own work (step time less communication) "
        "is at least this % over the step's median across ranks")
    top_ranks: int = threshold(3, "ranks", "slowest ranks listed per step")
    host_busy_pct: float = threshold(
        50.0, "%", "GPU idle time counts as host/launch-bound when the host was busy at least this % "
        "of the step, else as stalled")
    heatmap_ranks: int = threshold(
        64, "ranks", "ranks shown in the rank x step heatmap and the aligned timeline (the most useful: "
        "stragglers first, then by own work)")


def split_thresholds(items: list[str]) -> tuple[StragglerThresholds, list[str]]:
    """The straggler thresholds among ``name=value`` items, and the other items; raises
    ``ValueError`` for a value that is not a number."""
    return parse_thresholds(StragglerThresholds, items)


def thresholds_doc() -> list[dict[str, Any]]:
    """Every straggler threshold with its default and meaning (``--help``)."""
    return documented_thresholds(StragglerThresholds)


_PARTS = ("compute", "communication wait", "data loading", "host/launch-bound", "stalled")


class SlowRank(TypedDict):
    """One of a step's slowest ranks: its own work, its excess over the step's median, and why."""

    rank: int
    own_us: float
    excess_pct: float
    straggler: bool
    cause: str  # one of ``_PARTS``
    evidence: str


class StragglerStep(TypedDict):
    """A step: how many ranks ran it, their median own work and the slowest ranks."""

    step: int
    ranks: int
    median_own_us: float
    slowest: list[SlowRank]


class RankRanking(TypedDict):
    """A rank's record over the steps: straggler, slowest, last to arrive at a collective."""

    rank: int
    straggler_steps: int
    slowest_steps: int
    arrived_last: int
    mean_excess_pct: float


class CollectiveWait(TypedDict):
    """How long a rank sat in collectives before the last rank arrived (``collective_wait``)."""

    rank: int
    collectives: int
    communication_us: float
    wait_us: float
    wait_pct: float
    arrived_last: int


class Heatmap(TypedDict):
    """Own work per rank (rows) and step (columns), in µs; None where a rank ran no such step."""

    ranks: list[int]
    steps: list[int]
    own_us: list[list[float | None]]


class Stragglers(TypedDict):
    """The cluster document's ``stragglers``."""

    thresholds: dict[str, float]
    steps: list[StragglerStep]
    ranking: list[RankRanking]
    collective_wait: list[CollectiveWait]
    heatmap: Heatmap


def _parts(row: dict[str, Any], th: StragglerThresholds) -> dict[str, float]:
    host_busy = row["host_busy_us"] >= th.host_busy_pct / 100 * row["duration_us"]
    return {"compute": row["compute_us"], "communication wait": row["communication_us"],
            "data loading": row["loading_us"],
            "host/launch-bound": row["gpu_idle_us"] if host_busy else 0.0,
            "stalled": 0.0 if host_busy else row["gpu_idle_us"]}


def _ms(us: float) -> str:
    return f"{us / 1e3:,.2f} ms"


def stragglers(steps: dict[int, list[dict[str, Any]]], alignment: ClockAlignment,
               collectives: dict[int, dict[str, Any]],
               th: StragglerThresholds = StragglerThresholds()) -> Stragglers:
    """``{thresholds, steps: [{step, median_own_us, slowest: [{rank, own_us, excess_pct, straggler,
    cause, evidence}]}], ranking: [{rank, straggler_steps, slowest_steps, arrived_last}],
    collective_wait: [...], heatmap: {...}}`` from each rank's per-step figures."""
    by_step: dict[int, dict[int, dict]] = {}
    for rank, rows in steps.items():
        for row in rows:
            by_step.setdefault(row["step"], {})[rank] = row
    wait = collective_wait(alignment, collectives)
    last = {row["rank"]: row["arrived_last"] for row in wait}
    out_steps: list[StragglerStep] = []
    counts: dict[int, int] = {}  # rank -> steps it was a straggler in
    slowest_counts: dict[int, int] = {}  # rank -> steps it was the slowest in
    own: dict[int, list[float]] = {}  # rank -> its own work's excess over each step's median, in %
    for step in sorted(by_step):
        ranks = by_step[step]
        own_us = {r: row["duration_us"] - row["communication_us"] for r, row in ranks.items()}
        median = float(np.median(list(own_us.values())))
        parts = {r: _parts(row, th) for r, row in ranks.items()}
        medians = {p: float(np.median([parts[r][p] for r in ranks])) for p in _PARTS}
        slowest: list[SlowRank] = []
        for r in sorted(own_us, key=lambda r: (-own_us[r], r))[:th.top_ranks]:
            excess = 100.0 * (own_us[r] - median) / median if median > 0 else 0.0
            cause = max(_PARTS, key=lambda p: parts[r][p] - medians[p])
            straggler = excess >= th.excess_pct and len(ranks) > 1
            evidence = (f"own work {_ms(own_us[r])} vs step median {_ms(median)} ({excess:+.1f} %); "
                        f"{cause} {_ms(parts[r][cause])} vs median {_ms(medians[cause])}")
            slowest.append({"rank": r, "own_us": own_us[r], "excess_pct": excess, "straggler": straggler,
                            "cause": cause, "evidence": evidence})
            if straggler:
                counts[r] = counts.get(r, 0) + 1
        if slowest:
            slowest_counts[slowest[0]["rank"]] = slowest_counts.get(slowest[0]["rank"], 0) + 1
        for r, v in own_us.items():
            own.setdefault(r, []).append(100.0 * (v - median) / median if median > 0 else 0.0)
        out_steps.append({"step": step, "ranks": len(ranks), "median_own_us": median, "slowest": slowest})
    ranking: list[RankRanking] = sorted(({"rank": r, "straggler_steps": counts.get(r, 0),
                       "slowest_steps": slowest_counts.get(r, 0), "arrived_last": last.get(r, 0),
                       "mean_excess_pct": float(np.mean(own[r]))} for r in own),
                     key=lambda x: (-x["straggler_steps"], -x["slowest_steps"], -x["arrived_last"],
                                    -x["mean_excess_pct"], x["rank"]))
    return {"thresholds": {f.name: getattr(th, f.name) for f in fields(th)},
            "steps": out_steps, "ranking": ranking, "collective_wait": wait,
            "heatmap": _heatmap(by_step, ranking, th)}


def collective_wait(alignment: ClockAlignment, collectives: dict[int, dict[str, Any]]) -> list[CollectiveWait]:
    """Per rank: ``{rank, collectives, communication_us, wait_us, wait_pct, arrived_last}``: the
    k-th collective of each name is matched across ranks; a rank waits from its own aligned start
    until the last rank's."""
    starts: dict[str, dict[int, np.ndarray]] = {}
    rows: dict[int, CollectiveWait] = {}
    for rank, c in collectives.items():
        index, s, e = np.asarray(c["name"]), np.asarray(c["start_ns"]), np.asarray(c["end_ns"])
        shift = offset_ns(alignment, rank)
        for i, name in enumerate(c["names"]):
            starts.setdefault(name, {})[rank] = s[index == i].astype(np.int64) - shift
        rows[rank] = {"rank": rank, "collectives": int(len(s)), "communication_us": float((e - s).sum()) / 1e3,
                      "wait_us": 0.0, "wait_pct": 0.0, "arrived_last": 0}
    for per_rank in starts.values():
        if len(per_rank) < 2:
            continue
        n = min(len(v) for v in per_rank.values())
        matrix = np.stack([v[:n] for v in per_rank.values()])
        latest = matrix.max(axis=0)
        last_rank = np.array(list(per_rank))[matrix.argmax(axis=0)]
        for rank, waits in zip(per_rank, latest - matrix):
            rows[rank]["wait_us"] += float(waits.sum()) / 1e3
            rows[rank]["arrived_last"] += int((last_rank == rank).sum())
    for row in rows.values():
        row["wait_pct"] = 100.0 * row["wait_us"] / row["communication_us"] if row["communication_us"] else 0.0
    return [rows[r] for r in sorted(rows)]


def _heatmap(by_step: dict[int, dict[int, dict]], ranking: list[RankRanking], th: StragglerThresholds) -> Heatmap:
    """Own work per (rank, step) in µs for at most ``heatmap_ranks`` ranks (stragglers first)."""
    ranks = [row["rank"] for row in ranking[:th.heatmap_ranks]]
    step_ids = sorted(by_step)
    cells = [[(by_step[s][r]["duration_us"] - by_step[s][r]["communication_us"]) if r in by_step[s] else None
              for s in step_ids] for r in ranks]
    return {"ranks": ranks, "steps": step_ids, "own_us": cells}


if __name__ == "__main__":  # the thresholds table of docs/cluster.md (scripts/gen_docs.py)
    print(markdown_table(StragglerThresholds))
