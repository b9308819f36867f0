"""Insights: rules that turn a profile and its summary into findings, each with evidence and a fix.

``insights(profile, summary, thresholds)`` runs every rule in ``RULES`` and returns a list of dicts::

    {"rule": "low_gpu_utilization", "severity": "high"|"medium"|"low", "scope": "device 1",
     "title": "...", "evidence": "...", "recommendation": "...", "metrics": {...}}

Each rule module declares its rules' thresholds beside them (``UsageThresholds``, ``LaunchThresholds``,
``HostThresholds``, ``AnswerThresholds``: fields made with ``thresholds.threshold``, whose metadata holds the help text and
unit); ``Thresholds`` is all of them in one frozen dataclass, in that order. Defaults follow
the SageMaker Debugger profiler rules where one exists (``LowGPUUtilization`` p95 70 %, ``StepOutlier``,
``LoadBalancing``, ``GPUMemoryIncrease`` 10 points, ``BatchSize`` 70/70/70, ``Dataloader``); the
others are the first things a GPU performance engineer checks; the host rules (CPU contention, a
host-bound job, DataLoader workers, recording operators) hold on any machine. Rules that need data a
trace lacks (steps, CPU-side events, memory samples, several ranks) stay silent rather than guess.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable

from cuda_tracer.model.correlate import Correlation
from cuda_tracer.profile import Profile

from ..summary_schema import Insight, Summary
from .answers import AnswerThresholds, compiled_overhead, low_mfu
from .context import Context
from .host import HostThresholds, cpu_contention, dataloader_workers, host_bound, record_operators
from .launch import (LaunchThresholds, comm_overlap, deep_stream_queue, launch_bound, pageable_copies,
                     sync_in_step)
from .usage import (UsageThresholds, batch_size_too_small, cpu_bottleneck, dataloader, gpu_memory_growth,
                    load_balancing, low_gpu_utilization, step_outliers, straggler_ranks)
from .thresholds import parse_thresholds
from .thresholds import thresholds_doc as documented_thresholds

__all__ = ["RULES", "Thresholds", "insights", "thresholds_doc"]


@dataclass(frozen=True)
class Thresholds(AnswerThresholds, HostThresholds, LaunchThresholds, UsageThresholds):
    """Every threshold the rules use (fields in base order: usage, launch, host, answers). Override any with
    ``Thresholds(name=value)`` or ``--threshold``."""

    @classmethod
    def parse(cls, items: list[str]) -> "Thresholds":
        """From ``name=value`` strings (e.g. ``gpu_util_low_pct=60``); raises ``ValueError``."""
        found, unknown = parse_thresholds(cls, items)
        if unknown:
            known = ", ".join(f.name for f in fields(cls))
            raise ValueError(f"unknown threshold {unknown[0]!r}; known: {known}")
        return found


RULES: dict[str, Callable[[Context], list[Insight]]] = {
    "low_gpu_utilization": low_gpu_utilization,
    "cpu_bottleneck": cpu_bottleneck,
    "step_outliers": step_outliers,
    "load_balancing": load_balancing,
    "straggler_ranks": straggler_ranks,
    "gpu_memory_growth": gpu_memory_growth,
    "batch_size_too_small": batch_size_too_small,
    "dataloader": dataloader,
    "launch_bound": launch_bound,
    "sync_in_step": sync_in_step,
    "pageable_copies": pageable_copies,
    "comm_overlap": comm_overlap,
    "deep_stream_queue": deep_stream_queue,
    "cpu_contention": cpu_contention,
    "host_bound": host_bound,
    "dataloader_workers": dataloader_workers,
    "record_operators": record_operators,
    "low_mfu": low_mfu,
    "compiled_overhead": compiled_overhead,
}
"""Every rule, by name, in the order the report lists them."""

_SEVERITY = {"high": 0, "medium": 1, "low": 2}


def insights(profile: Profile, summary: Summary, thresholds: Thresholds | None = None,
             corr: Correlation | None = None) -> list[Insight]:
    """Run every rule; findings sorted by severity (rule order within a severity). ``corr``:
    ``correlate`` of ``profile.batch()``, where the caller has it already (one rank)."""
    ctx = Context(profile, summary, thresholds or Thresholds(), corr)
    found = [i for rule in RULES.values() for i in rule(ctx)]
    return sorted(found, key=lambda i: _SEVERITY[i["severity"]])


def thresholds_doc(code: str = "") -> list[dict[str, Any]]:
    """Every threshold with its default and meaning (for ``--help`` and the report). Names the help
    marks as ````code```` are written between ``code`` (plain text by default; "`" for Markdown)."""
    return documented_thresholds(Thresholds, code)
