"""The map step: one input (a rank's trace file, local or an fsspec URL, or a profile folder) read
with the streaming reader into compact, mergeable ``RankPartial``s, one per rank.

A partial holds what grows with the rank's distinct names, steps and devices, never with its event
count: the rank's own summary section, its insights, sketches of every distribution the whole-job
summary describes (``sketch.Sketch``), full per-operator kernel tables (cut to the summary's top
lists only after merging), per-step figures and its collective kernels (bounded).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any, TypedDict, cast

import msgspec
import numpy as np
import numpy.ma  # noqa: F401  (numpy 2's np.unique imports it on first use: here, not in a first task)

from cuda_tracer.loading import load_profile
from cuda_tracer.model.correlate import correlate
from cuda_tracer.model.events import EventBatch, Kind, MemcpyKind, SyncKind
from cuda_tracer.profile import Profile, RankProfile, TraceError
from cuda_tracer.trace_json.files import is_trace_file, read_trace

from ..analysis.attribution.operators import annotation_rows
from ..analysis.flops.result import TOP_OPERATORS
from ..analysis.insights import Thresholds, insights
from ..analysis.summary import cut_top_kernels, kernel_shapes, summarize
from ..analysis.summary_schema import (ComputeHost, CpuUsage, DeviceBreakdown, Insight, Launch, RankMeta,
                                       RankSection, Steps, StreamRow, Summary, TransferStats, WindowKey)
from ..analysis.summary_schema.sections import Communication, Compiled, Flops, Memory, Operators
from .rank_steps import collectives, step_figures
from .sketch import Sketch

RANK_SECTION_SKIP = ("schema", "sources", "platform", "ranks_meta", "compute", "cpu", "notes")
"""Keys of a one-rank ``summarize`` that are not part of the rank's section under ``ranks``."""


class _RankFigureKeys(WindowKey):
    events: dict[str, int]
    devices: dict[str, DeviceBreakdown]
    memcpy: dict[str, TransferStats]
    memset: TransferStats
    launch: Launch
    streams: list[StreamRow]
    steps: Steps
    memory: Memory
    by_class: dict[str, float]
    flops: Flops  # every operator row: the merge adds them up
    compiled: Compiled
    communication: Communication


class RankFigures(_RankFigureKeys, total=False):
    """What the merge reads of a rank's section: its parts as they are (``events`` to ``memory``),
    the kernel time by class, and the sections it merges (the rest it builds from sketches and the
    uncut operator tables; the whole section travels compressed, for the document's ``ranks``).
    ``kernel_classes`` (each kernel's class, by raw name) is taken out by the reduction."""

    kernel_classes: dict[str, str]


def _plain(value: Any) -> Any:
    """A NumPy scalar as the Python number ``json`` would have written."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"cannot encode {type(value).__name__}")


_SECTION_ENCODER = msgspec.json.Encoder(enc_hook=_plain)
"""The rank's section as JSON: several times ``json.dumps``'s speed (``json`` reads it back)."""

try:  # ISA-L's deflate: zlib's format (``zlib.decompress`` reads it) at about 5x zlib's speed
    from isal.isal_zlib import compress as _compress
except ImportError:  # pragma: no cover - isal is a dependency
    from zlib import compress as _compress  # type: ignore[assignment]


@dataclass
class RankPartial:
    """One rank's compact figures (see the module docstring)."""

    source: str
    rank: int
    meta: RankMeta
    section_json: bytes
    figures: RankFigures
    platform: str
    compute: list[ComputeHost]
    cpu: dict[str, CpuUsage]
    insights: list[Insight]
    sketches: dict[str, dict[str, Sketch]]
    geometry: dict[str, dict[tuple, int]]
    operators: Operators | None  # None once the reduction has folded it in
    steps: list[dict[str, Any]]
    collectives: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    def drop_tables(self) -> None:
        """Forget what the merge has folded in (sketches, launch shapes, operator tables)."""
        self.sketches, self.geometry, self.operators = {}, {}, None


def is_url(path: str) -> bool:
    return "://" in path


def read_partials(source: str, thresholds: Thresholds | None = None, max_text_bytes: int | None = None,
                  fallback_rank: int = 0) -> list[RankPartial | str]:
    """The partials of every rank in ``source``; a rank that cannot be read is its error line. A
    trace file that names no rank (no ``distributedInfo``, no ``rank-N`` in its name) is rank
    ``fallback_rank`` (the caller's input position: distinct across the inputs)."""
    folder = _fetched(source) if is_url(source) else None
    path = os.path.join(folder, _base_name(source)) if folder else source
    try:
        if is_trace_file(path):
            ranks, refused = [read_trace(path, max_text_bytes)], []
            if ranks[0].rank < 0:
                ranks[0].meta["rank"] = fallback_rank
                if len(ranks[0].batch):
                    ranks[0].batch.columns["rank"][:] = fallback_rank
        else:
            profile = load_profile([path], workers=1, skip_bad=True, max_text_bytes=max_text_bytes)
            ranks, refused = profile.ranks, profile.refused
    except TraceError as exc:
        return [str(TraceError(source, exc.problem))]
    finally:
        if folder:
            shutil.rmtree(folder, ignore_errors=True)
    out: list[RankPartial | str] = [str(TraceError(source, e.problem)) if folder else str(e) for e in refused]
    for rank in ranks:
        rank.meta.setdefault("file", source)
        if folder:
            rank.meta["file"] = source
        out.append(rank_partial(rank, source, thresholds or Thresholds()))
    return out


def _base_name(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


def _fetched(url: str) -> str:
    """A private temporary folder holding a copy of the file at ``url`` (fsspec) under its own name
    (its name can carry its rank)."""
    import fsspec

    folder = tempfile.mkdtemp(prefix="otel-profiler-rank-")
    try:
        with open(os.path.join(folder, _base_name(url)), "wb") as out, fsspec.open(url, "rb") as f:
            while chunk := f.read(1 << 22):
                out.write(chunk)
    except Exception as exc:
        shutil.rmtree(folder, ignore_errors=True)
        raise TraceError(url, f"cannot read ({exc})") from None
    return folder


def rank_partial(rank: RankProfile, source: str, thresholds: Thresholds) -> RankPartial:
    one = Profile(ranks=[rank], sources=[source])
    batch = rank.batch
    corr = correlate(batch)
    summary = summarize(one, every_kernel=True, corr=corr)
    ops = summary["operators"]
    summary["operators"] = cut_top_kernels(ops)  # as ``summarize`` gives it
    found = insights(one, summary, thresholds, corr)
    section = _rank_section(summary)
    section["steps"].pop("source", None)  # top level only
    section["memory"].pop("snapshots", None)
    window: WindowKey = {"window_us": section["window_us"]} if "window_us" in section else {}
    figures: RankFigures = {
        "events": section["events"], **window, "devices": section["devices"], "memcpy": section["memcpy"],
        "memset": section["memset"], "launch": section["launch"], "streams": section["streams"],
        "steps": section["steps"], "memory": section["memory"], "by_class": section["kernels"]["by_class"],
        "flops": summary["flops"], "compiled": section["compiled"], "communication": section["communication"],
        "kernel_classes": {r["raw_name"]: r["class"] for r in section["kernels"]["by_name"]}}
    section["flops"] = {**summary["flops"], "by_operator": summary["flops"]["by_operator"][:TOP_OPERATORS]}
    return RankPartial(
        source=source, rank=rank.rank, meta=summary["ranks_meta"][0],
        section_json=_compress(_SECTION_ENCODER.encode(section), 1), figures=figures,
        platform=summary["platform"], compute=summary["compute"], cpu=summary["cpu"],
        insights=found, sketches=_sketches(batch, corr), geometry=_geometry(batch),
        operators=ops, steps=step_figures(batch, corr), collectives=collectives(batch),
        notes=summary["notes"])


def _rank_section(summary: Summary) -> RankSection:
    """A one-rank summary less its document-level keys (``RANK_SECTION_SKIP``), in its order: the
    rank's figures (built key by key, hence the cast)."""
    return cast(RankSection, {k: v for k, v in summary.items() if k not in RANK_SECTION_SKIP})


def _by_name(batch: EventBatch, rows: np.ndarray) -> dict[str, Sketch]:
    return {batch.strings[i]: s for i, s in Sketch.by_group(batch.name[rows], batch.duration_ns[rows]).items()}


def _sketches(batch: EventBatch, corr) -> dict[str, dict[str, Sketch]]:
    durations = batch.duration_ns
    out: dict[str, dict[str, Sketch]] = {
        "kernels": _by_name(batch, np.flatnonzero(batch.kind == Kind.KERNEL)),
        "runtime_api": _by_name(batch, corr.launch_rows),
        "annotations": _by_name(batch, annotation_rows(batch)),
        "gpu_annotations": _by_name(batch, annotation_rows(batch, Kind.GPU_USER_ANNOTATION)),
    }
    memcpy = batch.kind == Kind.MEMCPY
    out["memcpy"] = {(mk.name if mk != MemcpyKind.UNKNOWN else "unknown"):
                     Sketch.of_ns(durations[memcpy & (batch.subkind == mk)]) for mk in MemcpyKind
                     if mk != MemcpyKind.UNKNOWN or (memcpy & (batch.subkind == mk)).any()}
    out["memset"] = {"": Sketch.of_ns(durations[batch.kind == Kind.MEMSET])}
    sync = batch.kind == Kind.SYNC
    out["sync"] = {"": Sketch.of_ns(durations[sync])}
    out["sync_kinds"] = {sk.name.lower(): Sketch.of_ns(durations[sync & (batch.subkind == sk)])
                         for sk in SyncKind if (sync & (batch.subkind == sk)).any()}
    matched = corr.matched
    out["launch"] = {"delay_us": Sketch.of_ns(corr.delay_ns[matched]),
                     "latency_us": Sketch.of_ns(corr.latency_ns[matched])}
    return out


def _geometry(batch: EventBatch) -> dict[str, dict[tuple, int]]:
    """Per kernel name: how many launches had each (grid, block) geometry."""
    uniq, counts = kernel_shapes(batch)
    out: dict[str, dict[tuple, int]] = {}
    for row, c in zip(uniq.tolist(), counts.tolist()):
        out.setdefault(batch.strings[row[0]], {})[tuple(row[1:])] = c
    return out
