"""Exact integer nanoseconds from the decimal timestamps of a trace file, vectorized.

The reader keeps ``ts`` and ``dur`` as their JSON text (``msgspec.Raw``), and ``decimal_ns`` turns
all of a chunk's values into integers at once: the texts are joined into one byte buffer, and each
digit is weighted by the power of ten its place gives it (``"1419116105360.746"`` µs is
``1419116105360746`` ns, digit by digit, with no float and no Python object per value). Digits
finer than a nanosecond are cut off, as ``int(Decimal(text) * 1000)`` does.

The vectorized path takes plain decimals (``-?digits[.digits]``, what every trace writer emits).
Anything else in a chunk (an exponent, ``null``, a string, a value past ``TIME_LIMIT_NS``) returns
None, and the caller converts that chunk the exact per-value way instead (``to_ns``).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

TIME_LIMIT_NS = 2**62  # far beyond any real clock; keeps start + duration inside int64

_POW10 = np.array([10**k for k in range(20)], np.uint64)


def decimal_ns(texts: Sequence[bytes], unit_digits: int = 3) -> np.ndarray | None:
    """``texts`` (JSON numbers in a unit of ``10**unit_digits`` ns) as int64 ns, or None when some
    value is not a plain decimal within ``TIME_LIMIT_NS``."""
    n = len(texts)
    if n == 0:
        return np.zeros(0, np.int64)
    joined = b" ".join(texts)
    if joined.translate(None, b"0123456789-. "):  # an exponent, null, a string: not plain decimals
        return None
    buf = np.frombuffer(joined, np.uint8)
    seps = np.flatnonzero(buf == 32)
    if len(seps) != n - 1:  # a text holding a space is no single number
        return None
    starts = np.concatenate(([0], seps + 1))
    ends = np.concatenate((seps, [len(buf)]))
    dots = np.flatnonzero(buf == 46)
    owner = np.searchsorted(ends, dots)  # the value each decimal point belongs to
    if len(owner) > 1 and not np.diff(owner).all():  # two points in one value
        return None
    point = ends.copy()  # each value's decimal point (its end when it has none)
    point[owner] = dots
    negative = buf[starts] == 45
    whole_digits = point - starts - negative
    frac_digits = np.maximum(ends - point - 1, 0)
    if whole_digits.max() > 18 or frac_digits.max() > 18:  # beyond int64: not a time anyway
        return None
    # "12.5" -> tokens "12" "5": each value's whole part, then its fraction when it has one
    tokens = np.fromstring(joined.replace(b".", b" "), dtype=np.int64, sep=" ")
    has_frac = point < ends
    if len(tokens) != n + len(dots):
        return None
    first = np.arange(n) + np.concatenate(([0], np.cumsum(has_frac)[:-1]))
    whole = np.abs(tokens[first])  # "-0.5": the sign is the value's, not its whole part's
    if whole.max() >= TIME_LIMIT_NS // 10**unit_digits:
        return None
    ns = whole * 10**unit_digits
    frac = np.zeros(n, np.int64)
    frac[has_frac] = tokens[first[has_frac] + 1]
    shift = unit_digits - frac_digits  # a fraction of f digits is worth 10**(unit_digits - f) ns
    finer = shift < 0
    ns += np.where(finer, frac // _POW10[np.maximum(-shift, 0)].astype(np.int64),
                   frac * _POW10[np.maximum(shift, 0)].astype(np.int64))  # finer than 1 ns: cut
    if ns.max() >= TIME_LIMIT_NS:
        return None
    ns[negative] *= -1
    return ns
