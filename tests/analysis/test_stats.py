"""``analysis.stats``' own median, percentiles and standard deviation give numpy's floats to the
last bit (the summary documents are compared byte for byte), on durations of every shape a trace
has: one value, two, ties, zeros, a long tail, values up to hours in ns."""

from __future__ import annotations

import numpy as np
import pytest

from otel_profiler.analysis.stats import describe_us, percentiles_us


def _samples():
    rng = np.random.default_rng(29)
    yield np.array([5], np.int64)
    yield np.array([7, 3], np.int64)
    yield np.zeros(4, np.int64)
    yield np.array([1, 1, 1, 2, 2, 1000], np.int64)
    for n in list(range(2, 40)) + [99, 100, 101, 1000, 4855]:
        yield rng.integers(0, 10**6, n)
        yield (rng.lognormal(8, 2, n)).astype(np.int64)
        yield rng.integers(0, 4 * 3600 * 10**9, n)


@pytest.mark.parametrize("values", list(_samples()), ids=lambda v: f"n{len(v)}")
def test_statistics_equal_numpys(values):
    v = values.astype(np.float64) / 1000.0
    d = describe_us(values)
    assert d["total_us"] == float(v.sum()) and d["avg_us"] == float(v.mean())
    assert d["med_us"] == float(np.median(v))
    assert d["min_us"] == float(v.min()) and d["max_us"] == float(v.max())
    assert d["std_us"] == (float(v.std(ddof=1)) if len(v) > 1 else 0.0)
    p = percentiles_us(values)
    assert [p["p50"], p["p90"], p["p99"]] == [float(x) for x in np.percentile(v, [50, 90, 99])]
    assert p["mean"] == float(v.mean()) and p["max"] == float(v.max()) and p["count"] == len(v)
