"""Types of the one-pass nesting built from ``_nesting.c`` (read by ``time_nesting.parents``)."""

import numpy as np

def enclosing(thread: np.ndarray, start: np.ndarray, end: np.ndarray, is_point: np.ndarray,
              out: np.ndarray, /) -> None: ...
