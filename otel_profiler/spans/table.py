"""The span table: spans as columns (``SpanTable``), with its attribute columns (``columns``) and
links to other traces (``LinkColumn``). What the builder makes, trace context joins and the OTLP
encoder writes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .columns import AttrColumn

@dataclass
class LinkColumn:
    """One span link over all spans: trace id (``trace_hi`` ++ ``trace_lo``) and span id; span id 0:
    no link on that span."""

    trace_hi: np.ndarray
    trace_lo: np.ndarray
    span_id: np.ndarray



SPAN_KIND_INTERNAL = 1
SCOPE_NAME = "otel_profiler"


@dataclass
class SpanTable:
    """Spans as columns. Ids are uint64 (a trace id is ``trace_hi`` ++ ``trace_lo``); 0 means none."""

    resource: dict[str, Any]
    names: list[str]
    trace_hi: np.ndarray
    trace_lo: np.ndarray
    span_id: np.ndarray
    parent_id: np.ndarray
    link_id: np.ndarray  # a link to a span of the same trace (the launch call), 0: no link
    name: np.ndarray  # index into names
    start_ns: np.ndarray
    end_ns: np.ndarray
    attrs: list[AttrColumn]
    values: list[Any]
    source_row: np.ndarray  # batch row of the event (-1: root or aggregate); not exported
    scope_name: str = SCOPE_NAME
    scope_version: str = ""
    extra_links: list[LinkColumn] = field(default_factory=list)  # links to other traces
    trace_states: dict[int, str] = field(default_factory=dict)  # span row -> W3C trace state

    def __len__(self) -> int:
        return len(self.span_id)

    def attr(self, key: str) -> AttrColumn:
        for a in self.attrs:
            if a.key == key:
                return a
        raise KeyError(key)

    def trace_hex(self, i: int) -> str:
        return f"{int(self.trace_hi[i]):016x}{int(self.trace_lo[i]):016x}"
