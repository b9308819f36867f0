"""Descriptive statistics in the ``nsys stats`` vocabulary: Total, Instances, Avg, Med, Min, Max, StdDev.

Grouping is vectorised: one sort of the group ids, then reductions over contiguous slices, so a
million kernel launches cost a few numpy passes rather than a Python loop per event.
"""

from __future__ import annotations

import numpy as np

NS_PER_US = 1000.0


def describe_us(values_ns: np.ndarray) -> dict[str, float]:
    """Count, total, avg, med, min, max and (sample) stddev of durations, in µs."""
    n = len(values_ns)
    if n == 0:
        return {"count": 0, "total_us": 0.0, "avg_us": 0.0, "med_us": 0.0, "min_us": 0.0,
                "max_us": 0.0, "std_us": 0.0}
    v = values_ns.astype(np.float64) / NS_PER_US
    return {"count": n, "total_us": float(v.sum()), "avg_us": float(v.mean()),
            "med_us": float(np.median(v)), "min_us": float(v.min()), "max_us": float(v.max()),
            "std_us": float(v.std(ddof=1)) if n > 1 else 0.0}


def percentiles_us(values_ns: np.ndarray) -> dict[str, float]:
    """p50, p90, p99, max and mean of a distribution, in µs (zeros when empty)."""
    if len(values_ns) == 0:
        return {"p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0, "mean": 0.0, "count": 0}
    v = values_ns.astype(np.float64) / NS_PER_US
    p50, p90, p99 = np.percentile(v, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99), "max": float(v.max()),
            "mean": float(v.mean()), "count": len(v)}


def group_durations(group_ids: np.ndarray, durations_ns: np.ndarray) -> list[tuple[int, dict]]:
    """Per distinct group id: ``describe_us`` of its durations, biggest total first."""
    if len(group_ids) == 0:
        return []
    order = np.lexsort((durations_ns, group_ids))
    ids, durs = group_ids[order], durations_ns[order].astype(np.float64) / NS_PER_US
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
        values = [np.unique(keys[:, j]) for j in range(keys.shape[1])]
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


def launch_geometry(shapes: tuple[np.ndarray, np.ndarray]) -> dict[int, tuple[list, list, int]]:
    """Per group id of ``shapes`` (``shape_counts``): its most frequent launch geometry as ([grid x,
    y, z], [block x, y, z]) and how many distinct geometries the group launched with."""
    uniq, counts = shapes
    order = np.lexsort((-counts, uniq[:, 0]))  # per group, the most frequent first
    groups = uniq[order, 0]
    firsts = np.flatnonzero(np.concatenate(([True], groups[1:] != groups[:-1]))) if len(groups) else groups
    configs = np.diff(np.append(firsts, len(groups)))
    return {row[0]: (row[1:4], row[4:7], n) for row, n in zip(uniq[order[firsts]].tolist(), configs.tolist())}
