"""The profiler's one warning channel inside a training process: ``warn`` issues a
``ProfilerWarning`` (shown once per message by Python's default filter) and never raises."""

from __future__ import annotations

import warnings


class ProfilerWarning(RuntimeWarning):
    """Everything the profiler has to tell the user (bad settings, backing off, a failure)."""


def warn(message: str) -> None:
    """Tell the user once, never raising (stderr may be unusable, e.g. inside a signal handler)."""
    try:
        warnings.warn(f"otel-profiler: {message}", ProfilerWarning, stacklevel=3)
    except Exception:
        pass
