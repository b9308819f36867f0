"""A mergeable sketch of a distribution of durations: exact count, total, sum of squares, minimum and
maximum, and quantiles from logarithmic buckets (each bucket spans a factor of ``GAMMA``), so that any
quantile it reports lies within ``RELATIVE_ACCURACY`` of a value of the same rank. Merging two
sketches adds their buckets: the size grows with the range of the values, never with their number.

A merge only notes the other sketch's buckets; they are added up once ``COMPACT_AFTER`` tables
have gathered, a quantile is read, or a worker hands its fold on (``Reduction.compact``): a task's
sketches then travel with one table each, the union of its ranks' buckets, and the client adds up
tables per sketch in batches rather than one per merge.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..analysis.summary_schema import DurationStats, Percentiles

RELATIVE_ACCURACY = 0.005
"""A quantile read from a sketch is within this fraction (0.5 %) of a true value of the same rank
(median, p50, p90 and p99 of the merged summary; counts, totals, means, min and max are exact)."""

GAMMA = (1 + RELATIVE_ACCURACY) / (1 - RELATIVE_ACCURACY)
_LOG_GAMMA = math.log(GAMMA)
COMPACT_AFTER = 64
"""Bucket tables merged into a sketch before they are added up (bounds what a sketch holds)."""


@dataclass
class Sketch:
    """Durations in µs: exact moments, quantiles from logarithmic buckets."""

    count: int = 0
    total: float = 0.0
    squares: float = 0.0
    low: float = math.inf
    high: float = -math.inf
    zeros: int = 0
    buckets: dict[int, int] = field(default_factory=dict)
    merged_buckets: list[dict[int, int]] = field(default_factory=list, repr=False, compare=False)
    """Bucket tables merged in and not yet added to ``buckets`` (``compact``)."""

    @classmethod
    def of_ns(cls, values_ns: np.ndarray) -> "Sketch":
        s = cls()
        if len(values_ns):
            v = values_ns.astype(np.float64) / 1e3
            s.count, s.total, s.squares = len(v), float(v.sum()), float((v * v).sum())
            s.low, s.high = float(v.min()), float(v.max())
            positive = v[v > 0]
            s.zeros = len(v) - len(positive)
            index, counts = np.unique(np.ceil(np.log(positive) / _LOG_GAMMA).astype(np.int64),
                                      return_counts=True)
            s.buckets = dict(zip(index.tolist(), counts.tolist()))
        return s

    @classmethod
    def by_group(cls, groups: np.ndarray, values_ns: np.ndarray) -> dict[int, "Sketch"]:
        """One sketch per distinct group id of ``values_ns``: one sort by group, then reductions
        over each group's slice (sums in the values' own order, as ``of_ns`` adds them)."""
        if not len(groups):
            return {}
        order = np.argsort(groups, kind="stable")
        g = groups[order]
        v = values_ns[order].astype(np.float64) / 1e3
        starts = np.flatnonzero(np.concatenate(([True], g[1:] != g[:-1])))
        ids, n = g[starts], len(starts)
        count = np.diff(np.append(starts, len(g)))
        inv = np.repeat(np.arange(n), count)
        total, squares = np.bincount(inv, v, n), np.bincount(inv, v * v, n)
        low, high = np.minimum.reduceat(v, starts), np.maximum.reduceat(v, starts)
        positive = v > 0
        zeros = count - np.add.reduceat(positive, starts)
        bucket = np.ceil(np.log(v[positive]) / _LOG_GAMMA).astype(np.int64)
        keys, counts = np.unique((inv[positive].astype(np.int64) << 32) | (bucket + (1 << 31)),
                                 return_counts=True)
        group_ids = ids.tolist()
        out = {i: cls(c, t, q, lo, hi, z) for i, c, t, q, lo, hi, z in zip(
            group_ids, count.tolist(), total.tolist(), squares.tolist(), low.tolist(), high.tolist(),
            zeros.tolist())}
        for key, c in zip(keys.tolist(), counts.tolist()):
            out[group_ids[key >> 32]].buckets[(key & 0xFFFFFFFF) - (1 << 31)] = c
        return out

    def merge(self, other: "Sketch") -> "Sketch":
        self.count += other.count
        self.total += other.total
        self.squares += other.squares
        self.low, self.high = min(self.low, other.low), max(self.high, other.high)
        self.zeros += other.zeros
        if other.buckets:
            self.merged_buckets.append(other.buckets)
        self.merged_buckets += other.merged_buckets
        if len(self.merged_buckets) >= COMPACT_AFTER:
            self.compact()
        return self

    def compact(self) -> None:
        """The bucket tables merged in added to ``buckets``."""
        if not self.merged_buckets:
            return
        buckets = self.buckets = dict(self.buckets)  # (it may be another sketch's, taken over)
        for table in self.merged_buckets:
            for i, c in table.items():
                buckets[i] = buckets.get(i, 0) + c
        self.merged_buckets = []

    def _value_at(self, rank: int) -> float:
        """The value of the ``rank``-th smallest (0-based) from the buckets, clamped to [min, max]."""
        if rank <= 0:
            return self.low
        if rank >= self.count - 1:
            return self.high
        if rank < self.zeros:
            return 0.0
        self.compact()
        seen = self.zeros
        for i in sorted(self.buckets):
            seen += self.buckets[i]
            if rank < seen:
                return min(max(2 * GAMMA ** i / (GAMMA + 1), self.low), self.high)
        return self.high

    def quantile(self, q: float) -> float:
        """The q-quantile (0..1) as ``numpy.percentile`` places it (linear between ranks)."""
        if not self.count:
            return 0.0
        at = q * (self.count - 1)
        below = math.floor(at)
        a, b = self._value_at(below), self._value_at(below + 1)
        return a + (b - a) * (at - below)

    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0

    def std(self) -> float:
        if self.count < 2:
            return 0.0
        m = self.mean()
        return math.sqrt(max((self.squares - self.count * m * m) / (self.count - 1), 0.0))

    def describe(self) -> DurationStats:
        """The fields of ``analysis.stats.describe_us``."""
        if not self.count:
            return {"count": 0, "total_us": 0.0, "avg_us": 0.0, "med_us": 0.0, "min_us": 0.0,
                    "max_us": 0.0, "std_us": 0.0}
        return {"count": self.count, "total_us": self.total, "avg_us": self.mean(),
                "med_us": self.quantile(0.5), "min_us": self.low, "max_us": self.high,
                "std_us": self.std()}

    def percentiles(self) -> Percentiles:
        """The fields of ``analysis.stats.percentiles_us``."""
        if not self.count:
            return {"p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0, "mean": 0.0, "count": 0}
        return {"p50": self.quantile(0.5), "p90": self.quantile(0.9), "p99": self.quantile(0.99),
                "max": self.high, "mean": self.mean(), "count": self.count}


def merged(sketches: dict[str, Sketch], more: dict[str, Sketch]) -> dict[str, Sketch]:
    """``sketches`` with each of ``more`` merged in by key (in place; returned). A sketch of
    ``more`` under a new key is taken over, not copied: ``more`` is not to be used after."""
    for key, s in more.items():
        if key in sketches:
            sketches[key].merge(s)
        else:
            sketches[key] = s
    return sketches
