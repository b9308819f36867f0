"""The span model's defaults, which are also the defaults of ``OTEL_PROFILER_SPAN_BUDGET`` and
``OTEL_PROFILER_SPAN_WINDOW_S`` (``config``) and of ``spans.options.SpanOptions``."""

from __future__ import annotations

DEFAULT_SPAN_BUDGET = 2000
"""Spans per trace (step)."""
DEFAULT_WINDOW_NS = 10_000_000_000
"""Events outside every step are grouped into traces of windows this long."""
