"""Shared test fixtures: where the real traces live."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_TRACES = Path(os.environ.get("OTEL_PROFILER_TEST_TRACES",
                                    REPO.parent / "shared" / "data" / "kineto_traces"))
ALL_TRACES = sorted(SHARED_TRACES.rglob("*.json.gz"))


def trace(relative: str) -> Path:
    """A shared trace by its path under kineto_traces/, e.g. ``hta/trace_filter/sampled_rank-0.json.gz``."""
    return SHARED_TRACES / relative


@pytest.fixture(scope="session")
def shared_traces() -> Path:
    if not ALL_TRACES:
        pytest.fail(f"the shared Kineto traces are missing under {SHARED_TRACES}")
    return SHARED_TRACES
