"""Per-group duration statistics: the packed one-key sort gives the two-key sort's order (ids and
durations that fit one integer, and ones that do not), and the statistics match a plain recount."""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from otel_profiler.analysis.stats import _by_group_then_duration, group_durations


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("wide", [False, True], ids=["packed", "two-key"])
def test_the_pairs_come_sorted_by_group_then_duration(seed, wide):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 2**40 if wide else 500, 20_000)
    durations = rng.integers(0, 2**40 if wide else 10**6, 20_000)
    order = np.lexsort((durations, ids))
    got_ids, got_durations = _by_group_then_duration(ids, durations)
    np.testing.assert_array_equal(got_ids, ids[order])
    np.testing.assert_array_equal(got_durations, durations[order])


def test_the_statistics_are_a_plain_recount():
    rng = np.random.default_rng(7)
    ids = rng.integers(0, 40, 5_000).astype(np.int32)
    durations = rng.integers(0, 5_000_000, 5_000)
    rows = dict(group_durations(ids, durations))
    assert sorted(rows) == sorted(set(ids.tolist()))
    for g, row in rows.items():
        us = [d / 1000 for d, i in zip(durations.tolist(), ids.tolist()) if i == g]
        assert row["count"] == len(us)
        assert row["total_us"] == pytest.approx(sum(us))
        assert row["med_us"] == pytest.approx(statistics.median(us))
        assert (row["min_us"], row["max_us"]) == (pytest.approx(min(us)), pytest.approx(max(us)))
        assert row["std_us"] == pytest.approx(statistics.stdev(us) if len(us) > 1 else 0.0)
    totals = [row["total_us"] for _, row in group_durations(ids, durations)]
    assert totals == sorted(totals, reverse=True)  # biggest total first
