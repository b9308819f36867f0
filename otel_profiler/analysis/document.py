"""The summary document: one profile's summary with its insights, built once and read by every
caller (``summary``, ``report``, ``run``'s printed table and ``summary.json``, the session's
``summary.json`` at exit) and every renderer (``otel_profiler.report.renderers``).

The summary (``summary.summarize``: figures and metadata: sources, ranks, platform, notes) is
computed on first use, so a renderer that needs only the events (Perfetto) pays nothing for it;
``insights`` are added to it under ``"insights"`` with the document's thresholds.
"""

from __future__ import annotations

from functools import cached_property

from cuda_tracer.model.correlate import correlate
from cuda_tracer.profile import Profile

from .insights import Thresholds, insights
from .summary import summarize
from .summary_schema import Summary


class SummaryDocument:
    """``profile`` and its summary (with ``insights``) under ``thresholds``."""

    def __init__(self, profile: Profile, thresholds: Thresholds | None = None) -> None:
        self.profile = profile
        self.thresholds = thresholds or Thresholds()
        self.thresholds_given = thresholds is not None

    @cached_property
    def summary(self) -> Summary:
        # one correlation of a one-rank profile for the figures and the insights (each made its own)
        corr = correlate(self.profile.batch()) if len(self.profile.ranks) == 1 else None
        out = summarize(self.profile, corr=corr)
        out["insights"] = insights(self.profile, out, self.thresholds, corr)
        return out
