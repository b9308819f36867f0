"""The statistical summary of a profile: the JSON contract behind ``otel-profiler summary``
(``"otel-profiler.summary/1"``), whose shape, with what each key means, ``summary_schema`` declares.

``summarize`` builds the document of a profile, ``summarize_batch`` the figures of one rank or of all
(``summary_schema.RankSection``), ``complete`` the parts taken from the whole document (also used by
the cluster's merge).
"""

from __future__ import annotations

from typing import Any, Iterable, TypeVar, cast

import numpy as np

from cuda_tracer.model.correlate import Correlation, correlate, queue_depths
from cuda_tracer.model.events import EventBatch, Kind, MemcpyKind, SyncKind
from cuda_tracer.profile import Profile, RankProfile

from ..names import demangle, short_names
from .attribution.compiled import compiled
from .attribution.modules import TOP_KERNELS as MODULE_TOP_KERNELS, modules
from .attribution.operators import EVERY_KERNEL, TOP_KERNELS as OPERATOR_TOP_KERNELS, annotation_rows, operators
from .breakdown import class_times, classify, device_breakdowns, idle_breakdown, KERNEL_CLASSES
from .communication import communication, empty_section, merge_ranks
from .flops.costs import flops_section
from .flops.result import meta_device_names
from .host.compute import compute_overview
from .host.cpu import cpu_usage
from .memory.allocator import memory
from .memory.snapshots import snapshots_in
from .platform import SYNC_API, blocking_call, platform_of
from .summary_schema import (SCHEMA, AnnotationRow, ApiRow, DurationStats, KernelRow, Kernels, Launch,
                             RankMeta, RankSection, StepItem, Steps, StepWindow, StreamRow, Summary, Sync,
                             SyncApiRow, TransferStats, WindowKey)
from .summary_schema.sections import ModuleRow, OperatorRow, Operators, RegionRow
from .windows import captured_windows
from .stats import describe_us, group_durations, launch_geometry, percentiles_us, shape_counts, time_stats


def summarize(profile: Profile, every_kernel: bool = False, corr: Correlation | None = None) -> Summary:
    """The summary of a whole profile (and of each rank when there are several); ``every_kernel``:
    the operator, module and region tables list all their kernels, not their top few
    (``cut_top_kernels`` cuts them back); ``corr``: ``correlate`` of a one-rank profile's batch,
    where the caller has it already."""
    multi = len({r.rank for r in profile.ranks}) > 1
    figures = summarize_batch(profile.batch(), multi_rank=multi, every_kernel=every_kernel,
                              corr=None if multi else corr, device_names=_device_names(profile.ranks))
    out: Summary = {"schema": SCHEMA, "sources": list(profile.sources),
                    "platform": platform_of(profile.batch(), (r.meta for r in profile.ranks)),
                    "ranks_meta": [_rank_meta(r.meta) for r in profile.ranks], **figures,
                    "compute": compute_overview(profile), "cpu": cpu_usage(profile),
                    "notes": []}  # ``complete`` writes them
    complete(out, list(profile.sources))
    if multi:
        out["ranks"] = {str(r.rank): summarize_batch(r.batch, multi_rank=False, every_kernel=every_kernel,
                                                     device_names=_device_names([r]))
                        for r in profile.ranks}
        out["communication"] = merge_ranks({rank: s["communication"] for rank, s in out["ranks"].items()})
    return out


def complete(out: Summary, snapshot_sources: list[str]) -> None:
    """The parts of a summary document taken from the whole of it: the memory snapshots beside its
    sources, the step source of every rank, the notes (also used by the cluster's merge)."""
    snapshots = snapshots_in(snapshot_sources)
    if snapshots:
        out["memory"]["snapshots"] = snapshots
    step_sources = sorted({m["step_source"] for m in out["ranks_meta"] if "step_source" in m})
    if step_sources:
        out["steps"]["source"] = step_sources[0] if len(step_sources) == 1 else ",".join(step_sources)
    captured = _merged([(first, last) for m in out["ranks_meta"] for first, last in m.get("captured_steps", [])])
    if captured:
        out["steps"]["captured"] = [list(pair) for pair in captured]
    windows: list[StepWindow] = [{"rank": m.get("rank", -1), "first_step": w["first_step"],
                                  "last_step": w["last_step"], "reason": w["reason"]}
                                 for m in out["ranks_meta"] for w in m.get("windows", [])]
    if windows:
        out["steps"]["windows"] = sorted(windows, key=lambda w: (w["rank"], w["first_step"]))
    out["notes"] = _notes(out)


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Inclusive step ranges, sorted, overlapping and adjacent ones joined."""
    out: list[tuple[int, int]] = []
    for first, last in sorted(ranges):
        if out and first <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], last))
        else:
            out.append((first, last))
    return out


def _captured_note(captured: list[list[int]]) -> str:
    """Which steps a live run captured in detail, and which step paid for closing each window."""
    more = ", ..." if len(captured) > 8 else ""
    shown = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in captured[:8]) + more
    after = ", ".join(str(b + 1) for _, b in captured[:8]) + more
    return (f"steps {shown} were captured in detail (operators, kernels); the step after each window "
            f"({after}) also holds the profiler's work of closing it, so compare step times outside them")


def _notes(summary: Summary) -> list[str]:
    notes = []
    if not summary["devices"]:
        notes.append("no GPU activity in this profile (no kernels, memory copies or memsets were recorded)")
    if summary["steps"].get("source") == "time":
        notes.append("no training step was seen (no step()/step_context, optimizer step or backward "
                     "pass): the profile holds a time window of the first torch work instead")
    orphans = summary["launch"]["orphan_gpu_ops"]
    if orphans:
        notes.append(f"{orphans} GPU ops have no launch call in the trace (launched before the "
                     "profiling window opened); they count in GPU time but not in launch statistics")
    if summary["steps"].get("captured"):
        notes.append(_captured_note(summary["steps"]["captured"]))
    skipped = sum(int(m.get("skipped_events") or 0) for m in summary.get("ranks_meta", []))
    if skipped:
        notes.append(f"{skipped} trace events were skipped: no name, or a time that is missing or "
                     "out of range (counted per rank as skipped_events)")
    return notes


def _rank_meta(meta: dict[str, Any]) -> RankMeta:
    """What ``ranks_meta`` keeps of a rank's metadata: its values as the trace or run wrote them (not
    checked here: the cast states the shape they are documented to have), the devices' names and
    the windows captured in detail."""
    keep = ("source", "file", "source_file", "rank", "world_size", "host_name", "versions", "format",
            "skipped_events", "step_source", "cuda_memory")
    out = {k: meta[k] for k in keep if k in meta}
    out["devices"] = [d.get("name") for d in meta.get("device_properties", []) if isinstance(d, dict)]
    windows = captured_windows(meta.get("windows"))
    if windows:
        out["captured_steps"] = [list(pair) for pair in _merged([(w["first_step"], w["last_step"]) for w in windows])]
        out["windows"] = windows
    return cast(RankMeta, out)


def _device_names(ranks: Iterable[RankProfile]) -> list[str]:
    """The GPU names the ranks' traces give (``deviceProperties``), first seen first."""
    return meta_device_names(r.meta for r in ranks)


def summarize_batch(batch: EventBatch, multi_rank: bool = False, every_kernel: bool = False,
                    corr: Correlation | None = None, device_names: list[str] | None = None) -> RankSection:
    """The figures of ``batch`` (one rank, or all of them: ``multi_rank`` keys devices by rank too)."""
    corr = corr if corr is not None else correlate(batch)
    durations = batch.duration_ns
    window: WindowKey = {}
    if len(batch):
        window["window_us"] = {"start_ns": int(batch.start_ns.min()), "end_ns": int(batch.end_ns.max()),
                               "span_us": float(batch.end_ns.max() - batch.start_ns.min()) / 1e3}
    runtime_api = _runtime_api(batch, corr)
    depth = {(q.rank, q.device, q.stream): q.max_depth for q in queue_depths(batch, corr)}
    streams: list[StreamRow] = [{**s, "max_queue_depth": depth.get((s["rank"], s["device"], s["stream"]), 0)}
                                for s in idle_breakdown(batch, corr)]
    top = {"top_kernels": EVERY_KERNEL} if every_kernel else {}
    operator_table = operators(batch, corr, **top)
    return {
        "events": batch.counts_by_kind(), **window,
        "devices": {(f"{rank}:{device}" if multi_rank else str(device)): figures
                    for rank, device, figures in device_breakdowns(batch)},
        "kernels": _kernels(batch, corr),
        "memcpy": _memcpy(batch),
        "memset": _transfer_stats(batch, np.flatnonzero(batch.kind == Kind.MEMSET)),
        "runtime_api": runtime_api,
        "sync": _sync(batch, runtime_api),
        "launch": _launch(batch, corr),
        "streams": streams,
        "annotations": _by_name(batch, Kind.USER_ANNOTATION, durations),
        "gpu_annotations": _by_name(batch, Kind.GPU_USER_ANNOTATION, durations),
        "steps": _steps(batch),
        "operators": {**operator_table, "modules": modules(batch, corr, **top)},
        "memory": memory(batch, multi_rank=multi_rank),
        "flops": flops_section(batch, corr, device_names or [], every_row=every_kernel),
        "communication": empty_section() if multi_rank else communication(batch),  # multi: from the ranks'
        "compiled": compiled(batch, corr),
    }


def _kernels(batch: EventBatch, corr: Correlation) -> Kernels:
    durations = batch.duration_ns
    kernel_rows = np.flatnonzero(batch.kind == Kind.KERNEL)
    kernel_total = float(durations[kernel_rows].sum()) / 1e3
    classes = classify(batch, kernel_rows)
    class_of_name = dict(zip(batch.name[kernel_rows].tolist(), classes.tolist()))
    geometry = launch_geometry(kernel_shapes(batch))
    groups = group_durations(batch.name[kernel_rows], durations[kernel_rows])
    raws = [batch.strings[name_id] for name_id, _ in groups]
    by_name: list[KernelRow] = []
    for (name_id, s), raw, short in zip(groups, raws, short_names(raws)):
        grid, block, configs = geometry.get(name_id, (None, None, 0))
        by_name.append({"name": demangle(raw), "raw_name": raw,
                        "class": KERNEL_CLASSES[class_of_name[name_id]],
                        "instances": s["count"], **time_stats(s),
                        "time_pct": 100.0 * s["total_us"] / kernel_total if kernel_total else 0.0,
                        "grid": grid, "block": block, "launch_configs": configs, "short_name": short})
    return {"count": len(kernel_rows), "total_us": kernel_total,
            "by_class": class_times(batch, corr.gpu_rows), "by_name": by_name}


def _memcpy(batch: EventBatch) -> dict[str, TransferStats]:
    """Per direction (``MemcpyKind`` names; ``unknown`` only when some copy has none)."""
    out: dict[str, TransferStats] = {}
    memcpy = batch.kind == Kind.MEMCPY
    for mk in MemcpyKind:
        rows = np.flatnonzero(memcpy & (batch.subkind == mk))
        if len(rows) or mk != MemcpyKind.UNKNOWN:
            key = mk.name if mk != MemcpyKind.UNKNOWN else "unknown"
            out[key] = _transfer_stats(batch, rows)
    return out


def _runtime_api(batch: EventBatch, corr: Correlation) -> list[ApiRow]:
    durations = batch.duration_ns
    api_rows = corr.launch_rows
    api_total = float(durations[api_rows].sum()) / 1e3
    return [{"name": batch.strings[n], "calls": s["count"], **time_stats(s),
             "time_pct": 100.0 * s["total_us"] / api_total if api_total else 0.0}
            for n, s in group_durations(batch.name[api_rows], durations[api_rows])]


def _sync(batch: EventBatch, runtime_api: list[ApiRow]) -> Sync:
    durations = batch.duration_ns
    sync_rows = np.flatnonzero(batch.kind == Kind.SYNC)
    by_kind: dict[str, DurationStats] = {}
    for sk in SyncKind:
        rows = sync_rows[batch.subkind[sync_rows] == sk]
        if len(rows):
            by_kind[sk.name.lower()] = describe_us(durations[rows])
    api: list[SyncApiRow] = [{**r, "blocking": blocking_call(r["name"])} for r in runtime_api
                             if r["name"] in SYNC_API or blocking_call(r["name"])]
    return {**describe_us(durations[sync_rows]), "by_kind": by_kind, "api": api,
            "host_blocked_us": sum(r["total_us"] for r in api if r["blocking"])}


def _launch(batch: EventBatch, corr: Correlation) -> Launch:
    matched = corr.matched
    launch_names = batch.name[corr.launch_of_gpu[matched]]
    ids, counts = np.unique(launch_names, return_counts=True)
    return {
        "matched_gpu_ops": int(matched.sum()), "orphan_gpu_ops": corr.orphan_count,
        "delay_us": percentiles_us(corr.delay_ns[matched]),
        "latency_us": percentiles_us(corr.latency_ns[matched]),
        "by_api": {batch.strings[i]: int(c) for i, c in zip(ids.tolist(), counts.tolist())},
    }


Row = TypeVar("Row", OperatorRow, RegionRow, ModuleRow)


def _cut(rows: list[Row], top: int) -> list[Row]:
    return [{**r, "top_kernels": r["top_kernels"][:top]} for r in rows]


def cut_top_kernels(table: Operators) -> Operators:
    """The operator table (``operators``, with its ``modules``) as built by default, from one built
    with ``top_kernels=EVERY_KERNEL``: each list of top kernels is sorted, so its first few are
    the default's."""
    if not table:
        return table
    out: Operators = {**table, "by_name": _cut(table["by_name"], OPERATOR_TOP_KERNELS),
                      "regions": _cut(table["regions"], OPERATOR_TOP_KERNELS)}
    if table.get("modules"):
        out["modules"] = {**table["modules"], "by_path": _cut(table["modules"]["by_path"], MODULE_TOP_KERNELS)}
    return out


def kernel_shapes(batch: EventBatch) -> tuple[np.ndarray, np.ndarray]:
    """``stats.shape_counts`` of the batch's kernels by name (made once per batch)."""
    cached = batch.__dict__.get("_kernel_shapes")
    if cached is None:
        rows = np.flatnonzero(batch.kind == Kind.KERNEL)
        cached = batch.__dict__["_kernel_shapes"] = shape_counts(batch.name[rows], np.column_stack(
            [batch.columns[c][rows] for c in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")]))
    return cached


def _transfer_stats(batch: EventBatch, rows: np.ndarray) -> TransferStats:
    durations = batch.duration_ns[rows]
    nbytes = batch.bytes[rows]
    total_bytes = int(nbytes[nbytes > 0].sum())
    stats = describe_us(durations)
    seconds = stats["total_us"] / 1e6
    return {**stats, "bytes": total_bytes,
            "throughput_gbps": total_bytes / seconds / 1e9 if seconds > 0 else 0.0}


def _by_name(batch: EventBatch, kind: Kind, durations: np.ndarray) -> list[AnnotationRow]:
    rows = annotation_rows(batch, kind)
    return [{"name": batch.strings[n], "instances": s["count"], **time_stats(s)}
            for n, s in group_durations(batch.name[rows], durations[rows])]


def _steps(batch: EventBatch) -> Steps:
    rows = np.flatnonzero(batch.kind == Kind.STEP)
    numbers = batch.extra("step")
    items: list[StepItem] = [
        {"step": numbers.get(int(r), -1), "rank": int(batch.rank[r]), "start_ns": int(batch.start_ns[r]),
         "duration_us": float(batch.end_ns[r] - batch.start_ns[r]) / 1e3} for r in rows]
    items.sort(key=lambda s: (s["rank"], s["start_ns"]))
    return {"count": len(items), "duration_us": percentiles_us(batch.duration_ns[rows]), "items": items}
