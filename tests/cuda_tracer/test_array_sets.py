"""``distinct`` against ``np.unique``, which it stands in for, on the dtypes the analyses pass."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from cuda_tracer.model.array_sets import distinct, distinct_codes


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8, np.bool_, np.float64, np.str_])
@pytest.mark.parametrize("size", [0, 1, 2, 1000])
def test_distinct_equals_numpy_unique(dtype, size) -> None:
    values = np.random.default_rng(size).integers(0, 7, size).astype(dtype)
    got, expected = distinct(values), np.unique(values)
    assert got.dtype == expected.dtype
    assert np.array_equal(got, expected)


def test_distinct_flattens_and_keeps_one_nan() -> None:
    grid = np.arange(12).reshape(3, 4) % 5
    assert np.array_equal(distinct(grid), np.unique(grid))
    floats = np.array([np.nan, 2.0, np.nan, 1.0])
    assert np.array_equal(distinct(floats), np.unique(floats), equal_nan=True)


def test_distinct_leaves_numpy_ma_unloaded() -> None:
    code = ("import sys, numpy as np\n"
            "from cuda_tracer.model.array_sets import distinct\n"
            "distinct(np.arange(10) % 3)\n"
            "print('numpy.ma' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("size", [0, 1, 7, 5000])
def test_distinct_codes_equal_numpy_unique_with_its_inverse(dtype, size) -> None:
    values = np.random.default_rng(size).integers(0, 40, size).astype(dtype)
    got, codes = distinct_codes(values, 41)
    expected, inverse = np.unique(values, return_inverse=True)
    assert got.dtype == expected.dtype and np.array_equal(got, expected)
    assert codes.dtype == inverse.dtype and np.array_equal(codes, inverse.reshape(-1))
