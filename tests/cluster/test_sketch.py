"""Mergeable duration sketches: merged in any grouping (past the point where merged bucket tables
are added up, and through pickling as a worker hands them on), they hold what one sketch of all
the values holds."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from otel_profiler.cluster.sketch import COMPACT_AFTER, RELATIVE_ACCURACY, Sketch, merged


def _chunks(seed: int, n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [np.where(rng.random(size) < 0.05, 0, rng.lognormal(9, 2, size)).astype(np.int64)
            for size in rng.integers(0, 400, n)]


def _merged_in_tasks(chunks: list[np.ndarray], per_task: int) -> Sketch:
    """The way a cluster folds them: tasks of ``per_task`` sketches merged, each task pickled
    (compacted as a worker hands it on), the tasks merged by the client."""
    client = Sketch()
    for i in range(0, len(chunks), per_task):
        task = Sketch()
        for c in chunks[i:i + per_task]:
            task.merge(Sketch.of_ns(c))
        task.compact()
        client.merge(pickle.loads(pickle.dumps(task)))
    return client


@pytest.mark.parametrize("per_task", [1, 7, COMPACT_AFTER + 3])
def test_merged_sketches_equal_one_sketch_of_all_values(per_task):
    chunks = _chunks(per_task, 3 * COMPACT_AFTER + 5)
    whole = Sketch.of_ns(np.concatenate(chunks))
    parts = _merged_in_tasks(chunks, per_task)
    for q in (0.0, 0.5, 0.9, 0.99, 1.0):
        assert parts.quantile(q) == whole.quantile(q)
    parts.compact()
    assert parts.buckets == whole.buckets
    assert (parts.count, parts.zeros, parts.low, parts.high) == (whole.count, whole.zeros, whole.low, whole.high)
    assert parts.total == pytest.approx(whole.total, rel=1e-12)
    assert len(parts.merged_buckets) == 0 < len(parts.buckets)


def test_a_sketch_holds_a_bounded_number_of_tables_and_quantiles_stay_within_accuracy():
    chunks = _chunks(3, 5 * COMPACT_AFTER)
    s = Sketch()
    for c in chunks:
        s.merge(Sketch.of_ns(c))
        assert len(s.merged_buckets) < COMPACT_AFTER
    values = np.sort(np.concatenate(chunks)) / 1e3
    for q in (0.5, 0.9, 0.99):
        true = np.percentile(values, 100 * q)
        assert abs(s.quantile(q) - true) <= 2 * RELATIVE_ACCURACY * true


def test_by_group_sketches_merge_like_of_ns():
    rng = np.random.default_rng(5)
    groups = rng.integers(0, 9, 5000)
    values = rng.lognormal(8, 1.5, 5000).astype(np.int64)
    by_group = Sketch.by_group(groups, values)
    for g, s in by_group.items():
        assert s.buckets == Sketch.of_ns(values[groups == g]).buckets
    tables: dict[str, Sketch] = {}
    for half in (slice(0, 2500), slice(2500, None)):
        merged(tables, {str(g): s for g, s in Sketch.by_group(groups[half], values[half]).items()})
    for g, s in by_group.items():
        assert tables[str(g)].quantile(0.5) == s.quantile(0.5)
