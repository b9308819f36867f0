"""``otel-profiler export --scheduler``: the per-rank work a Dask worker (or a local process) does.

Two tasks per rank. ``rank_identity`` reads the rank and returns what the client needs to settle its
run id and rank number as the plain ``export`` does for the whole folder (its recorded run id, its
profiler window, its rank). ``export_rank`` reads it again and sends its spans straight to the OTLP
target with the same pipeline, ids and delivery/spool rules as ``otel-profiler export`` (piece by
piece), returning the pipeline's counters. Either returns one error line instead when the rank
cannot be read, so the others go on. Each rank keeps its own clock.
"""

from __future__ import annotations

from typing import Any

from cuda_tracer.model.batch_pieces import step_pieces
from cuda_tracer.profile import RankProfile, TraceError

from .export_config import ExportConfig
from .pipeline import Counters, Pipeline

COUNTS = ("spans_built", "spans_exported", "spans_dropped")
"""The counters the client adds up over the ranks."""


def _read_rank(source: str, max_text_bytes: int | None) -> RankProfile:
    """The one rank of ``source`` (a trace file or a profile folder); raises ``TraceError``."""
    from cuda_tracer.loading import load_profile

    profile = load_profile([source], workers=1, skip_bad=True, max_text_bytes=max_text_bytes, one_job=False)
    if profile.refused:
        raise profile.refused[0]
    if len(profile.ranks) != 1:
        raise TraceError(source, f"holds {len(profile.ranks)} ranks; give its rank files one by one")
    return profile.ranks[0]


def _error_line(source: str, exc: Exception) -> str:
    if isinstance(exc, TraceError):
        return str(exc)
    return f"{source}: cannot be read ({type(exc).__name__}: {exc})"


def rank_identity(source: str, max_text_bytes: int | None = None) -> dict[str, Any] | str:
    """The rank's recorded ``run_id`` (or None), ``profiler_window_ns`` and ``rank`` (-1: none), or
    its error line."""
    try:
        rank = _read_rank(source, max_text_bytes)
    except Exception as exc:  # one rank's failure is its line, never the cluster's
        return _error_line(source, exc)
    meta = rank.meta
    return {"run_id": meta.get("run_id") or None, "profiler_window_ns": meta.get("profiler_window_ns"),
            "rank": rank.rank}


def export_rank(item: tuple[str, str, int], export_config: ExportConfig,
                max_text_bytes: int | None = None) -> dict[str, int] | str:
    """Send the spans of ``(source, run_id, rank)`` to ``export_config``'s target; its counters
    (``COUNTS``) or its error line."""
    source, run_id, number = item
    try:
        rank = _read_rank(source, max_text_bytes)
    except Exception as exc:
        return _error_line(source, exc)
    if not rank.meta.get("run_id"):
        rank.meta["run_id"] = run_id
    if rank.rank < 0:  # numbered on the client, as the plain reading numbers unranked files
        rank.meta["rank"] = number
        if len(rank.batch):
            rank.batch.columns["rank"][:] = number
    counters = Counters()
    pipeline = Pipeline(export_config, counters)
    try:
        for piece in step_pieces(rank.batch, window_ns=export_config.span_options.window_ns):
            pipeline.handle(rank.meta, piece)
    finally:
        pipeline.close()
    c = counters.snapshot()
    return {k: int(c.get(k, 0)) for k in COUNTS}
