"""The multi-rank analysis end to end: inputs expanded into rank sources (folders on a shared file
system, or fsspec URLs such as ``s3://bucket/run/``), each read into partials by an executor's
workers (``partial.read_partials``), merged on the client (``merge``), clocks aligned (``align``) and
stragglers explained (``stragglers``). Unreadable ranks come back as one line each.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cuda_tracer.jobs import check_one_job
from cuda_tracer.profile import Profile, RankProfile, TraceError
from cuda_tracer.profile_folder import is_profile_folder
from cuda_tracer.trace_json.files import is_trace_file

from ..analysis.insights import Thresholds
from ..analysis.summary_schema import Insight, Summary, Window
from .align import ClockAlignment, clock_offsets, offset_ns
from .executor import executor_for
from .merge import SEVERITY, Reduction
from .partial import RankPartial, is_url, read_partials
from .stragglers import Stragglers, StragglerThresholds, stragglers


class ClusterSummary(Summary):
    """The cluster's document: the summary of all its ranks (``merge``), the ranks' clock offsets
    (``align``) and the stragglers explained (``stragglers``); ``insights`` hold the straggler
    findings too."""

    clock_alignment: ClockAlignment
    stragglers: Stragglers


TIMELINE_BARS = 200
"""Collectives drawn per rank in the aligned timeline (its first ones)."""


@dataclass
class ClusterResult:
    """The merged summary document and the lines naming each rank that could not be read."""

    summary: ClusterSummary
    refused: list[str] = field(default_factory=list)
    lanes: list[dict[str, Any]] = field(default_factory=list)
    """The aligned timeline's lanes (``report.cluster_html``): the heatmap's ranks."""


class _Window:
    """A rank's time window in the shape ``jobs.check_one_job`` reads of a rank's events (their
    first start and last end), so the one-job rules of the local reading hold here too."""

    def __init__(self, window: Window | None) -> None:
        self.start_ns = np.array([window["start_ns"]] if window else [], np.int64)
        self.end_ns = np.array([window["end_ns"]] if window else [], np.int64)

    def __len__(self) -> int:
        return len(self.start_ns)


def _check_one_job(partials: list[RankPartial]) -> None:
    """``jobs.check_one_job``'s rules on the partials' ranks; a file given twice is found here by
    its real path, once per rank (the rule compares every pair of files)."""
    seen: dict[str, str] = {}
    for p in partials:
        file = p.meta.get("file")
        if isinstance(file, str) and not is_url(file):
            real = os.path.realpath(file)
            if real in seen:
                raise TraceError(file, "not part of the same job as the other traces: it is given twice")
            seen[real] = file
    check_one_job(Profile(ranks=[RankProfile(_named_only(p.meta), _Window(p.figures.get("window_us")))  # type: ignore[arg-type]
                                 for p in partials]))


def _named_only(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The rank's metadata with its file as its name only (the pairwise same-file test is done)."""
    out = {k: v for k, v in meta.items() if k != "file"}
    out["source"] = meta.get("file") or meta.get("source")
    return out


def rank_sources(inputs: list[str]) -> list[str]:
    """Each input's rank sources: a folder's trace files, a profile folder, a file or URL; a URL to
    a folder (``s3://bucket/run/``) its trace files. Raises ``TraceError`` for a missing input."""
    out: list[str] = []
    for path in inputs:
        if is_url(path):
            out.extend(_url_sources(path))
        elif os.path.isdir(path) and not is_profile_folder(path):
            files = sorted(p for p in glob.glob(os.path.join(path, "*")) if is_trace_file(p))
            out.extend(files or [path])
        elif os.path.exists(path):
            out.append(path)
        else:
            raise TraceError(path, "no such file or folder")
    return out


def _url_sources(url: str) -> list[str]:
    try:
        from fsspec.core import url_to_fs
    except ImportError:
        raise TraceError(url, "reading URLs needs the remote extra: "
                              "pip install -e '.[remote]' in the otel-profiler clone") \
            from None
    try:
        fs, path = url_to_fs(url)
        if fs.isdir(path):
            files = sorted(p for p in fs.ls(path, detail=False) if is_trace_file(p))
            if not files:
                raise TraceError(url, "folder holds no trace files (*.json, *.json.gz)")
            return [fs.unstrip_protocol(p) for p in files]
        if not fs.exists(path):
            raise TraceError(url, "no such file or folder")
    except TraceError:
        raise
    except Exception as exc:  # any filesystem's error: one line, not a traceback
        raise TraceError(url, f"cannot list ({exc})") from None
    return [url]


def read_safely(item: tuple[int, str], **kwargs: Any) -> list[RankPartial | str]:
    """``read_partials`` of the ``(input position, source)`` item, with any failure of one source as
    its error line (the others go on)."""
    position, source = item
    try:
        return read_partials(source, fallback_rank=position, **kwargs)
    except TraceError as exc:
        return [str(exc)]
    except Exception as exc:
        return [f"{source}: cannot be read ({type(exc).__name__}: {exc})"]


def read_run(items: list[tuple[int, str]], **kwargs: Any) -> tuple[Reduction, list[str]]:
    """One task: a run of consecutive inputs read and folded on the worker, so the client folds
    one table set per task; the ranks' error lines."""
    reduction, refused = Reduction(), []
    for item in items:
        for r in read_safely(item, **kwargs):
            if isinstance(r, str):
                refused.append(r)
            else:
                reduction.add(r)
    reduction.compact()
    return reduction, refused


MAX_TASK_INPUTS = 16
"""The most inputs one task reads (and folds) before handing its result to the client."""


def task_runs(count: int) -> list[int]:
    """How many inputs each task reads, in the order the tasks are handed out (guided
    self-scheduling): each takes a quarter of the inputs left, at least a 64th of all of them and
    at most ``MAX_TASK_INPUTS``. Large tasks first keep the tasks few (each costs the worker, the
    scheduler and the client some milliseconds of CPU besides its ranks); small ones last leave no
    worker long idle while another finishes the run. The shapes depend on the number of inputs
    only, so that any cluster (and local processes) folds the ranks in the same groups and gives
    the same document, to the bit.

    64 ranks: 13 tasks, the last four of one rank each, instead of 16 tasks of 4 ranks; on two
    workers, the client's CPU 0.24 -> 0.19 s and the scheduler's 0.14 -> 0.11 s (medians of 12
    runs on fresh clusters, alternating). 256 ranks: 21 tasks down to 4 ranks instead of 16 of 16;
    1,024 ranks: 64 tasks of 16, as before."""
    runs = []
    left, least = count, max(1, count // 64)
    while left > 0:
        runs.append(min(left, MAX_TASK_INPUTS, max(least, -(-left // 4))))
        left -= runs[-1]
    return runs


def analyse(inputs: list[str], scheduler: str | None = None, thresholds: Thresholds | None = None,
            workers: int | None = None, max_text_bytes: int | None = None,
            straggler_thresholds: StragglerThresholds = StragglerThresholds()) -> ClusterResult:
    """The summary document of ``inputs`` read on ``scheduler`` (a Dask address; None or "local":
    local processes). Raises ``TraceError`` when no rank can be read."""
    sources = rank_sources(inputs)
    executor = executor_for(scheduler, workers)
    reduction = Reduction(spill=True)
    refused: list[str] = []
    items = list(enumerate(sources))
    tasks, start = [], 0
    for size in task_runs(len(items)):
        tasks.append(items[start:start + size])
        start += size
    try:
        for part, lines in executor.map(read_run, tasks, thresholds=thresholds, max_text_bytes=max_text_bytes):
            reduction.absorb(part)  # folded in at once: the client holds no partial's tables
            refused.extend(lines)
    finally:
        executor.close()
    partials = reduction.partials
    if not partials:
        if refused:
            raise TraceError(*refused[-1].split(": ", 1)) if ": " in refused[-1] else \
                TraceError(", ".join(inputs), refused[-1])
        raise TraceError(", ".join(inputs), "no ranks found")
    _check_one_job(partials)
    merged = reduction.document(sources)
    collectives = {p.rank: p.collectives for p in partials}
    alignment = clock_offsets(collectives)
    found = stragglers({p.rank: p.steps for p in partials}, alignment, collectives, straggler_thresholds)
    summary: ClusterSummary = {**merged, "clock_alignment": alignment, "stragglers": found}
    summary["insights"] = sorted(straggler_insights(found) + merged.get("insights", []),
                                 key=lambda i: SEVERITY[i["severity"]])
    return ClusterResult(summary, refused,
                         timeline_lanes(partials, alignment, found["heatmap"]["ranks"]))


def timeline_lanes(partials: list[RankPartial], alignment: ClockAlignment, ranks: list[int]) -> list[dict]:
    """Per rank of ``ranks``: its steps and first ``TIMELINE_BARS`` collectives on the aligned clock."""
    by_rank = {p.rank: p for p in partials}
    lanes = []
    for r in ranks:
        p, shift = by_rank[r], offset_ns(alignment, r)
        c = p.collectives
        lanes.append({"rank": r, "steps": [(s["start_ns"] - shift, s["end_ns"] - shift, s["step"]) for s in p.steps],
                      "collectives": [(int(a) - shift, int(b) - shift) for a, b in
                                      zip(c["start_ns"][:TIMELINE_BARS], c["end_ns"][:TIMELINE_BARS])]})
    return lanes


def straggler_insights(found: Stragglers) -> list[Insight]:
    """One finding per rank that was a straggler in any step, worst first (at most 5)."""
    out: list[Insight] = []
    for row in found["ranking"][:5]:
        if not row["straggler_steps"]:
            break
        steps = [s for s in found["steps"] for x in s["slowest"] if x["rank"] == row["rank"] and x["straggler"]]
        worst = max((x for s in steps for x in s["slowest"] if x["rank"] == row["rank"]),
                    key=lambda x: x["excess_pct"])
        out.append({"rule": "cluster_straggler", "severity": "high" if worst["excess_pct"] >= 25 else "medium",
                    "scope": f"rank {row['rank']}",
                    "title": f"Straggler rank {row['rank']}: {worst['cause']}",
                    "evidence": f"slowest in {row['straggler_steps']} of {len(found['steps'])} step(s), "
                                f"last to arrive at {row['arrived_last']} collective(s); {worst['evidence']}",
                    "recommendation": _advice(worst["cause"]),
                    "metrics": {"straggler_steps": row["straggler_steps"], "excess_pct": worst["excess_pct"]}})
    return out


def _advice(cause: str) -> str:
    return {"compute": "Balance the work per rank (uneven batches or sequence lengths, a slower GPU, "
                       "thermal throttling): compare this rank's kernels with a fast rank's (otel-profiler diff).",
            "communication wait": "Check this rank's network path and its peers: its collectives take longer.",
            "data loading": "Give this rank's DataLoader more workers or faster storage.",
            "host/launch-bound": "The host cannot launch work fast enough on this rank: check for CPU "
                                 "contention on its host, or capture the step in a CUDA graph.",
            "stalled": "Neither the GPU nor the host worked: look for I/O, checkpointing, garbage "
                       "collection or preemption on this rank's host."}[cause]
