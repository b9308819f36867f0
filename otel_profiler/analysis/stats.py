"""Descriptive statistics in the ``nsys stats`` vocabulary: Total, Instances, Avg, Med, Min, Max, StdDev.

Grouping is vectorised: one sort of the group ids, then reductions over contiguous slices, so a
million kernel launches cost a few numpy passes rather than a Python loop per event.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from cuda_tracer.model.array_sets import distinct

if TYPE_CHECKING:  # (the summary's types: a span export need not import them, 10 ms)
    from .summary_schema import DurationStats, Percentiles, TimeStats


NS_PER_US = 1000.0


def describe_us(values_ns: np.ndarray) -> DurationStats:
    """Count, total, avg, med, min, max and (sample) stddev of durations, in µs."""
    n = len(values_ns)
    if n == 0:
        return {"count": 0, "total_us": 0.0, "avg_us": 0.0, "med_us": 0.0, "min_us": 0.0,
                "max_us": 0.0, "std_us": 0.0}
    v = values_ns.astype(np.float64) / NS_PER_US
    total = float(v.sum())  # in the values' own order, as numpy adds them
    ordered = np.sort(v)
    return {"count": n, "total_us": total, "avg_us": total / n, "med_us": _median(ordered),
            "min_us": float(ordered[0]), "max_us": float(ordered[-1]), "std_us": _std(v, total / n)}


def time_stats(stats: DurationStats) -> TimeStats:
    """``stats`` without its count (a row names the count its own way: instances, calls)."""
    return {"total_us": stats["total_us"], "avg_us": stats["avg_us"], "med_us": stats["med_us"],
            "min_us": stats["min_us"], "max_us": stats["max_us"], "std_us": stats["std_us"]}


def percentiles_us(values_ns: np.ndarray) -> Percentiles:
    """p50, p90, p99, max and mean of a distribution, in µs (zeros when empty)."""
    if len(values_ns) == 0:
        return {"p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0, "mean": 0.0, "count": 0}
    v = values_ns.astype(np.float64) / NS_PER_US
    ordered = np.sort(v)
    return {"p50": _percentile(ordered, 0.5), "p90": _percentile(ordered, 0.9),
            "p99": _percentile(ordered, 0.99), "max": float(ordered[-1]),
            "mean": float(v.sum()) / len(v), "count": len(v)}


# numpy's median, percentile ("linear") and std, computed the way numpy does (the same floats to the
# last bit, tests/analysis/test_stats.py) without its per-call overhead (tens of µs, and these run a few
# dozen times per rank). ``v``: non-empty float64, sorted for the median and percentiles; sums are
# taken in the values' own order (numpy's pairwise sums depend on it).

def _median(v: np.ndarray) -> float:
    n = len(v)
    return float(v[n // 2]) if n % 2 else (float(v[n // 2 - 1]) + float(v[n // 2])) / 2


def _percentile(v: np.ndarray, q: float) -> float:
    """``np.percentile(v, 100 * q)``: linear between the ranks around ``(n - 1) * q``, the
    interpolation taken from the upper value when past half-way, as numpy's ``_lerp`` does."""
    at = (len(v) - 1) * q
    below = math.floor(at)
    if below >= len(v) - 1:
        return float(v[-1])
    a, b = float(v[below]), float(v[below + 1])
    t = at - below
    return b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t


def _std(v: np.ndarray, mean: float) -> float:
    """``v.std(ddof=1)``: 0 for a single value."""
    if len(v) < 2:
        return 0.0
    d = v - mean
    return math.sqrt(float((d * d).sum()) / (len(v) - 1))


def group_durations(group_ids: np.ndarray, durations_ns: np.ndarray) -> list[tuple[int, DurationStats]]:
    """Per distinct group id: ``describe_us`` of its durations, biggest total first."""
    if len(group_ids) == 0:
        return []
    ids, durs = _by_group_then_duration(group_ids, durations_ns)
    durs = durs.astype(np.float64) / NS_PER_US
    starts = np.flatnonzero(np.concatenate(([True], ids[1:] != ids[:-1])))
    ends = np.append(starts[1:], len(ids))
    counts = ends - starts
    totals = np.add.reduceat(durs, starts)
    sq = np.add.reduceat(durs * durs, starts)
    means = totals / counts
    var = np.where(counts > 1, (sq - counts * means * means) / np.maximum(counts - 1, 1), 0.0)
    # Sorted within each group, so min/max/median are positional.
    mins, maxs = durs[starts], durs[ends - 1]
    lo, hi = starts + (counts - 1) // 2, starts + counts // 2
    meds = (durs[lo] + durs[hi]) / 2
    by_total = np.argsort(-totals, kind="stable")
    columns = (ids[starts], counts, totals, means, meds, mins, maxs, np.sqrt(np.maximum(var, 0.0)))
    return [(g, {"count": n, "total_us": t, "avg_us": a, "med_us": m, "min_us": lo_, "max_us": hi_,
                 "std_us": sd})
            for g, n, t, a, m, lo_, hi_, sd in zip(*(c[by_total].tolist() for c in columns))]


def _by_group_then_duration(group_ids: np.ndarray, durations_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The (group id, duration) pairs sorted by group, then duration: one sort of the pairs packed
    into one integer each where they fit (ids and durations non-negative integers), else a
    two-key sort."""
    if group_ids.dtype.kind in "iu" and durations_ns.dtype.kind in "iu" and \
            durations_ns.min() >= 0 and group_ids.min() >= 0:
        shift = int(durations_ns.max()).bit_length()
        if shift <= 62 and int(group_ids.max()) >> (62 - shift) == 0:
            packed = np.sort((group_ids.astype(np.int64) << shift) | durations_ns.astype(np.int64))
            return packed >> shift, packed & ((1 << shift) - 1)
    order = np.lexsort((durations_ns, group_ids))
    return group_ids[order], durations_ns[order]


def _unique(values: np.ndarray, counts: bool, axis: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique`` with its counts (``counts``) or else its inverse."""
    if counts:
        return np.unique(values, axis=axis, return_counts=True)
    return np.unique(values, axis=axis, return_inverse=True)


def unique_rows(keys: np.ndarray, counts: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, axis=0, return_inverse=True)`` (or ``return_counts`` with ``counts``) for
    an (n, k) integer array, in a fraction of its time and memory: each row is coded as one integer
    (ordered as the rows are, lexicographically) from each column's range, or from its distinct
    values where the ranges are too wide, and those codes are made unique."""
    keys = keys.astype(np.int64, copy=False)
    if not len(keys):
        return _unique(keys, counts, axis=0)
    low = keys.min(axis=0)
    radix = keys.max(axis=0) - low + 1
    values = None
    if np.prod(radix.astype(float)) >= 2.0**62:  # wide ranges: each column's distinct values
        values = [distinct(keys[:, j]) for j in range(keys.shape[1])]
        radix = np.array([len(v) for v in values], np.int64)
        if np.prod(radix.astype(float)) >= 2.0**62:  # codes would not fit: the plain way
            uniq, found = _unique(keys, counts, axis=0)
            return uniq, found.reshape(-1)
    code = np.zeros(len(keys), np.int64)
    for j in range(keys.shape[1]):
        code *= radix[j]
        code += keys[:, j] - low[j] if values is None else np.searchsorted(values[j], keys[:, j])
    combined, found = _unique(code, counts)
    del code
    uniq = np.empty((len(combined), keys.shape[1]), np.int64)
    for j in range(keys.shape[1] - 1, -1, -1):
        combined, column = np.divmod(combined, radix[j])
        uniq[:, j] = column + low[j] if values is None else values[j][column]
    return uniq, found.reshape(-1)


def shape_counts(group_ids: np.ndarray, geometry: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows (group id, grid x, y, z, block x, y, z) of the launches with a recorded
    geometry (``geometry`` is (n, 6); all -1: none), in order, and how many launches had each."""
    known = (geometry >= 0).any(axis=1)
    if not known.any():
        return np.zeros((0, 7), np.int64), np.zeros(0, np.int64)
    keys = np.column_stack([group_ids[known].astype(np.int64), geometry[known].astype(np.int64)])
    return unique_rows(keys, counts=True)


def launch_geometry(shapes: tuple[np.ndarray, np.ndarray]) -> dict[int, tuple[list[int], list[int], int]]:
    """Per group id of ``shapes`` (``shape_counts``): its most frequent launch geometry as ([grid x,
    y, z], [block x, y, z]) and how many distinct geometries the group launched with."""
    uniq, counts = shapes
    order = np.lexsort((-counts, uniq[:, 0]))  # per group, the most frequent first
    groups = uniq[order, 0]
    firsts = np.flatnonzero(np.concatenate(([True], groups[1:] != groups[:-1]))) if len(groups) else groups
    configs = np.diff(np.append(firsts, len(groups)))
    return {row[0]: (row[1:4], row[4:7], n) for row, n in zip(uniq[order[firsts]].tolist(), configs.tolist())}
