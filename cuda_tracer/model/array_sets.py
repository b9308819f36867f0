"""The distinct values of an array, as ``np.unique`` gives them, for the analyses' many calls.

numpy 2's ``np.unique`` checks every plain call for a masked array, which imports ``numpy.ma`` on
first use (about 20 ms, more than a summary's other first-use costs together), and then takes its
hash-table path, which on integer columns is several times slower than a sort: 5.2 ms against
0.55 ms for 216k int64 values with 8 distinct ones (``docs/benchmarks.md``).
"""

from __future__ import annotations

import numpy as np


def distinct(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values of ``values`` (flattened), equal to ``np.unique(values)``."""
    flat = np.asarray(values).ravel()
    if flat.dtype.kind in "fcmMO":  # NaN and NaT are one value to np.unique, never equal to a sort
        return np.unique(flat, return_counts=True)[0]
    ordered = np.sort(flat)
    keep = np.empty(len(ordered), dtype=bool)
    keep[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def distinct_codes(values: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` of a 1-D array of integers in ``[0, size)`` (name
    ids: ``size`` is the string table's length), found with a table of ``size`` entries instead of
    a sort: 3.9 ms against 26 ms for 700k operator names (``docs/benchmarks.md``)."""
    seen = np.zeros(size, bool)
    seen[values] = True
    uniq = np.flatnonzero(seen)
    code = np.zeros(size, np.intp)
    code[uniq] = np.arange(len(uniq))
    return uniq.astype(values.dtype, copy=False), code[values]
