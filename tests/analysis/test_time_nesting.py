"""Nesting by time: the packed two-key sort gives exactly the order of the six-key one, on every
kind of input (ties, points, wide ranges that take the unpacked path)."""

from __future__ import annotations

import numpy as np
import pytest

from otel_profiler.analysis.attribution.time_nesting import _start_order


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("wide", [False, True])
def test_start_order_is_the_lexsort_order(seed, wide):
    rng = np.random.default_rng(seed)
    n = 5000
    thread = rng.integers(0, 2**40 if wide else 6, n)
    start = rng.integers(10**15, 10**15 + (2**40 if wide else 10**4), n)
    end = start + rng.integers(0, 50, n)  # many equal starts and ends
    is_point = rng.integers(0, 2, n).astype(bool)
    np.testing.assert_array_equal(_start_order(thread, start, end, is_point),
                                  np.lexsort((is_point, -end, start, thread)))


def test_start_order_of_nothing_is_empty():
    empty = np.zeros(0, np.int64)
    assert len(_start_order(empty, empty, empty, empty.astype(bool))) == 0
