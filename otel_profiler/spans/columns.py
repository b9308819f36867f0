"""Attribute columns of a span table under construction: one numpy column per attribute key, set on
some spans, and the table of string / list values they index. Used by the span builder and its
attribute catalogue (``attributes``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from cuda_tracer.model.events import MISSING, Kind

KIND_NAMES: dict[Kind, str] = {k: k.name.lower() for k in Kind}
KIND_NAMES[Kind.USER_ANNOTATION] = "annotation"
KIND_NAMES[Kind.GPU_USER_ANNOTATION] = "gpu_annotation"
"""The value of ``otel_profiler.kind`` for each event kind."""

_DTYPES: dict[str, type] = {"int": np.int64, "double": np.float64, "bool": np.bool_, "value": np.int64}


@dataclass
class AttrColumn:
    """One attribute over all spans: ``values`` per span, set where ``present`` (None: everywhere).

    ``type`` is ``int`` (int64), ``double`` (float64), ``bool`` or ``value`` (int index into
    ``SpanTable.values``: any string / list value, encoded once per distinct value).
    """

    key: str
    type: str
    values: np.ndarray
    present: np.ndarray | None = None


class Columns:
    """Collects the attribute columns of a span table under construction."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.attrs: list[AttrColumn] = []
        self.values: list[Any] = []
        self._value_index: dict[Any, int] = {}

    def value_id(self, value: Any) -> int:
        key = (type(value).__name__, tuple(value) if isinstance(value, list) else value)
        i = self._value_index.get(key)
        if i is None:
            i = self._value_index[key] = len(self.values)
            self.values.append(value)
        return i

    def add(self, key: str, type_: str, rows: np.ndarray, values: np.ndarray) -> None:
        """Set ``key`` on spans ``rows`` (skips empty ones)."""
        if not len(rows):
            return
        col: np.ndarray = np.zeros(self.n, _DTYPES[type_])
        col[rows] = values
        present = np.zeros(self.n, bool)
        present[rows] = True
        self.attrs.append(AttrColumn(key, type_, col, None if present.all() else present))

    def add_present(self, key: str, rows: np.ndarray, values: np.ndarray) -> None:
        """Integer attribute on ``rows`` where the value is not ``MISSING``."""
        ok = values != MISSING
        self.add(key, "int", rows[ok], values[ok])

    def add_values(self, key: str, rows: np.ndarray, per_row: list[Any]) -> None:
        """String or list attribute: one value per span of ``rows``."""
        self.add(key, "value", rows, np.array([self.value_id(v) for v in per_row], np.int64))
