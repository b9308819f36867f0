"""The statistical summary of a profile: the JSON contract behind ``otel-profiler summary``.

Shape (all times in µs, every section present even when empty)::

    {"schema": "otel-profiler.summary/1", "sources": [...], "platform": "cuda"|"rocm"|"unknown",
     "ranks_meta": [{rank, source, file?, world_size, host_name, devices, step_source?, ...}],
     # step_source (live profiles): step(), step_context, optimizer, backward, time or none
     "events": {kind: count},
     "devices": {id: {span_us, busy_us, idle_us, idle_pct, compute_us, compute_pct,
                      non_compute_us, non_compute_pct, ops}},
     "kernels": {count, total_us, by_class: {compute, communication, memory},
                 by_name: [{name, raw_name, short_name, class, instances, total_us, avg_us,
                            med_us, min_us, max_us, std_us, time_pct,
                            grid: [x, y, z], block: [x, y, z], launch_configs}]},
     "memcpy": {HtoD|DtoH|DtoD|PtoP|HtoH|unknown: {count, bytes, total_us, avg_us, ...,
                                                 throughput_gbps}},
     "memset": {count, bytes, total_us, ...},
     "runtime_api": [{name, calls, total_us, avg_us, med_us, min_us, max_us, std_us, time_pct}],
     "sync": {count, total_us, by_kind: {stream|event|context|stream_wait_event|unknown: {...}},
              api: [{name, calls, total_us, ..., blocking: "sync"|"copy"|null}],
              host_blocked_us},
     "launch": {matched_gpu_ops, orphan_gpu_ops, delay_us: {p50,p90,p99,max,mean,count},
                latency_us: {...}, by_api: {name: count}},
     "streams": [{rank, device, stream, ops, span_us, host_wait_us, kernel_wait_us, other_us,
                  max_queue_depth}],
     "annotations": [{name, instances, total_us, ...}], "gpu_annotations": [...],
     "steps": {count, duration_us: {p50,p90,p99,max,mean,count}, items: [{step, start_ns, duration_us}],
               source,   # top level only: where live steps came from (ranks_meta[].step_source)
               captured: [[first, last]], windows: [{rank, first_step, last_step, reason}]},
               # live runs: the steps captured in detail, and each window (``analysis.windows``)
     "operators": {count, kernel_total_us, attributed_us,
                   attributed_by: {external_id, enclosing_operator},
                   unattributed: {no_launch: {kernels, gpu_us}, no_operator: {kernels, gpu_us}},
                   by_name: [{name, calls, total_cpu_us, self_cpu_us, self_gpu_us, total_gpu_us,
                              kernels, gpu_pct, top_kernels: [{name, raw_name, count, gpu_us}]}],
                   regions: [{name, kind: "cuda_graph"|"compiled", kernels, gpu_us, top_kernels}],
                   modules: {calls, kernel_total_us, attributed_us, outside: {kernels, gpu_us},
                             by_path: [{path, name, depth, parent, calls, cpu_us, self_gpu_us,
                                        total_gpu_us, kernels, top_kernels}],
                             by_type: [{type, calls, cpu_us, self_gpu_us, kernels}]}},
                             # modules: {} without nn.Module events; by_name rows carry
                             # call_stacks: [{stack, calls}] where the trace recorded them
     "memory": {events, devices: {device: {baseline: "absolute"|"window_start", events, allocations,
                frees, peak: {allocated_bytes, reserved_bytes, time_ns, step, operator},
                peak_reserved_bytes, final_allocated_bytes,
                steps: [{step, peak_allocated_bytes, end_allocated_bytes, growth_bytes}],
                largest_allocations: [{bytes, time_ns, step, operator}]}},
                host: {cpu: <the same, for the CPU allocator's events>},   # when recorded
                snapshots: [{file, bytes, rank, reason, segments, reserved_bytes, allocated_bytes,
                             active_bytes, devices, history_events, largest_blocks, error?}]},
                # snapshots: top level, CUDA memory snapshots found in a profile folder
     "compute": [{host, ranks, os?, cpu_model?, cpu_cores?: {logical, physical}, memory_bytes?,
                  gpus: [{index, name, uuid, memory_bytes}], driver, versions, instance_type?:
                  {value, source}, source: "live"|"trace"}],   # top level: one per host
     "cpu": {rank: {samples, interval_s, window: "steps"|"run", cores, machine_cores,
                    machine_pct: {mean, p50, max}, process_pct: {mean, p50, max}, process_cores,
                    others_cores, job_cores?}},   # top level: CPU utilization of live runs ({} for trace files)
     "ranks_meta": [{..., cuda_memory: {steps: [{step, device, peak_allocated_bytes,
                     peak_reserved_bytes, allocated_bytes}], snapshots: [{reason, file}]}}],
     "flops": {operators, flops, bytes, gpu_us,
               by_class: {gemm|conv|attention|elementwise|other: {flops, bytes, gpu_us, tflops_per_s, tb_per_s}},
               by_operator: [{name, shapes, dtype, class, calls, flops, bytes, gpu_us, tflops_per_s,
                              tb_per_s, intensity, bound: "compute"|"memory"|null}],
               peak: {device, dtype, tflops, tb_per_s} | null, mfu: 0-1 | null,
               by_step: [{step, rank, duration_us, flops, mfu}]},
               # from input shapes (record_shapes); definitions in analysis.flops.costs
     "communication": {total_us, exposed_us, overlap_pct, kernels,
                       by_collective: [{collective, device, stream, kernels, total_us, exposed_us, overlap_pct}],
                       by_step: [{step, step_us, total_us, exposed_us, overlap_pct, exposed_pct_of_step}],
                       by_rank?: [{rank, total_us, exposed_us, overlap_pct}]},
                       # communication kernels hidden behind computation kernels (HTA's overlap);
                       # definitions in analysis.communication; by_rank for multi-rank profiles
     "compiled": {regions: [{name, pass, calls, cpu_us, self_cpu_us, gpu_us,
                             kernels: [{name, raw_name, triton, fused_ops, fused_ops_sure, kind, calls, gpu_us}],
                             cpu_kernels: [...], graphs: [{name, calls, cpu_us, extern_cpu_us, kernel_cpu_us}]}],
                  triton_gpu_us, extern_gpu_us, outside_gpu_us,
                  dynamo: {cache_lookups: {count, cpu_us}, compiles: {count, cpu_us, ids},
                           recompilations: {count, ids}, python_us_in_regions?}},
                  # torch.compile; definitions in analysis.attribution.compiled
     "ranks": {rank: <this same shape for one rank>}   # only for multi-rank profiles
    }

Device keys are the device index for a single-rank profile and ``"<rank>:<device>"`` otherwise.

Names: ``name`` is what a person reads (C++ symbols demangled, see ``otel_profiler.names``);
``raw_name`` is the name as the trace recorded it (mangled where it was), ``short_name`` its short
form (template arguments folded). ``grid``/``block`` are a kernel's most frequent launch geometry
(``null`` when the trace has none) and ``launch_configs`` how many distinct ones it launched with.
``sync.api`` lists the calls that make the host wait: explicit synchronization (``blocking:
"sync"``), blocking copies such as ``cudaMemcpy`` or ``hipMemcpyWithStream`` (``"copy"``) and
stream waits (``null``: the host does not wait); ``host_blocked_us`` sums the host-blocking ones.
``platform`` names the GPU API of the trace (``runtime_api`` lists ``cuda*`` or ``hip*`` calls).
``operators``: the operator view, each kernel's time given to the innermost operator that launched
it (``self_gpu_us``; ``total_gpu_us`` adds the operator's descendants); definitions in
``otel_profiler.analysis.attribution.operators``; ``operators.modules``: the ``nn.Module`` hierarchy
(``otel_profiler.analysis.attribution.modules``). ``memory``: GPU memory from the allocator's
``[memory]`` events (bytes; empty without ``profile_memory``); definitions in
``otel_profiler.analysis.memory.allocator``. ``cpu``: the machine's and the training process's CPU
utilization while the steps ran, from a live run's samples (definitions in
``otel_profiler.analysis.host.cpu``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cuda_tracer.model.correlate import Correlation, correlate, queue_depths
from cuda_tracer.model.events import EventBatch, Kind, MemcpyKind, SyncKind
from cuda_tracer.profile import Profile

from ..names import demangle, short_names
from .attribution.compiled import compiled
from .attribution.modules import TOP_KERNELS as MODULE_TOP_KERNELS, modules
from .attribution.operators import EVERY_KERNEL, TOP_KERNELS as OPERATOR_TOP_KERNELS, annotation_rows, operators
from .breakdown import class_times, classify, idle_breakdown, temporal_breakdown, KERNEL_CLASSES
from .communication import communication, empty_section, merge_ranks
from .flops.costs import flops_section
from .flops.result import meta_device_names
from .host.compute import compute_overview
from .host.cpu import cpu_usage
from .memory.allocator import memory
from .memory.snapshots import snapshots_in
from .platform import SYNC_API, blocking_call, platform_of
from .windows import captured_windows
from .stats import describe_us, group_durations, launch_geometry, percentiles_us, shape_counts

SCHEMA = "otel-profiler.summary/1"


def summarize(profile: Profile, every_kernel: bool = False, corr: Correlation | None = None
              ) -> dict[str, Any]:
    """The summary of a whole profile (and of each rank when there are several); ``every_kernel``:
    the operator, module and region tables list all their kernels, not their top few
    (``cut_top_kernels`` cuts them back); ``corr``: ``correlate`` of a one-rank profile's batch,
    where the caller has it already."""
    multi = len({r.rank for r in profile.ranks}) > 1
    out = summarize_batch(profile.batch(), multi_rank=multi, every_kernel=every_kernel,
                          corr=None if multi else corr, device_names=_device_names(profile.ranks))
    out = {"schema": SCHEMA, "sources": list(profile.sources),
           "platform": platform_of(profile.batch(), (r.meta for r in profile.ranks)),
           "ranks_meta": [_rank_meta(r.meta) for r in profile.ranks], **out}
    out["compute"] = compute_overview(profile)
    out["cpu"] = cpu_usage(profile)
    complete(out, list(profile.sources))
    if multi:
        out["ranks"] = {str(r.rank): summarize_batch(r.batch, multi_rank=False, every_kernel=every_kernel,
                                                     device_names=_device_names([r]))
                        for r in profile.ranks}
        out["communication"] = merge_ranks({rank: s["communication"] for rank, s in out["ranks"].items()})
    return out


def complete(out: dict[str, Any], snapshot_sources: list[str]) -> None:
    """The parts of a summary document taken from the whole of it: the memory snapshots beside its
    sources, the step source of every rank, the notes (also used by the cluster's merge)."""
    snapshots = snapshots_in(snapshot_sources)
    if snapshots:
        out["memory"]["snapshots"] = snapshots
    step_sources = sorted({m["step_source"] for m in out["ranks_meta"] if "step_source" in m})
    if step_sources:
        out["steps"]["source"] = step_sources[0] if len(step_sources) == 1 else ",".join(step_sources)
    captured = _merged([tuple(pair) for m in out["ranks_meta"] for pair in m.get("captured_steps", [])])
    if captured:
        out["steps"]["captured"] = [list(pair) for pair in captured]
    windows = [dict(w, rank=m.get("rank", -1)) for m in out["ranks_meta"] for w in m.get("windows", [])]
    if windows:
        out["steps"]["windows"] = sorted(({"rank": w["rank"], "first_step": w["first_step"], "last_step": w["last_step"],
                                           "reason": w["reason"]} for w in windows),
                                         key=lambda w: (w["rank"], w["first_step"]))
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


def _notes(summary: dict) -> list[str]:
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


def _rank_meta(meta: dict) -> dict:
    keep = ("source", "file", "source_file", "rank", "world_size", "host_name", "versions", "format",
            "skipped_events", "step_source", "cuda_memory")
    out = {k: meta[k] for k in keep if k in meta}
    out["devices"] = [d.get("name") for d in meta.get("device_properties", []) if isinstance(d, dict)]
    windows = captured_windows(meta.get("windows"))
    if windows:
        out["captured_steps"] = [list(pair) for pair in _merged([(w["first_step"], w["last_step"]) for w in windows])]
        out["windows"] = windows
    return out


def _device_names(ranks: Any) -> list[str]:
    """The GPU names the ranks' traces give (``deviceProperties``), first seen first."""
    return meta_device_names(r.meta for r in ranks)


def summarize_batch(batch: EventBatch, multi_rank: bool = False, every_kernel: bool = False,
                    corr: Correlation | None = None, device_names: list[str] | None = None) -> dict[str, Any]:
    corr = corr if corr is not None else correlate(batch)
    durations = batch.duration_ns
    out: dict[str, Any] = {"events": batch.counts_by_kind()}
    if len(batch):
        out["window_us"] = {"start_ns": int(batch.start_ns.min()), "end_ns": int(batch.end_ns.max()),
                            "span_us": float(batch.end_ns.max() - batch.start_ns.min()) / 1e3}

    devices = {}
    for d in temporal_breakdown(batch):
        key = f"{d['rank']}:{d['device']}" if multi_rank else str(d["device"])
        devices[key] = {k: v for k, v in d.items() if k not in ("rank", "device")}
    out["devices"] = devices

    kernel_rows = np.flatnonzero(batch.kind == Kind.KERNEL)
    kernel_total = float(durations[kernel_rows].sum()) / 1e3
    classes = classify(batch, kernel_rows)
    class_of_name = dict(zip(batch.name[kernel_rows].tolist(), classes.tolist()))
    geometry = launch_geometry(kernel_shapes(batch))
    by_name = []
    for name_id, s in group_durations(batch.name[kernel_rows], durations[kernel_rows]):
        raw = batch.strings[name_id]
        grid, block, configs = geometry.get(name_id, (None, None, 0))
        by_name.append({"name": demangle(raw), "raw_name": raw,
                        "class": KERNEL_CLASSES[class_of_name[name_id]],
                        "instances": s.pop("count"), **s,
                        "time_pct": 100.0 * s["total_us"] / kernel_total if kernel_total else 0.0,
                        "grid": grid, "block": block, "launch_configs": configs})
    for row, short in zip(by_name, short_names([r["raw_name"] for r in by_name])):
        row["short_name"] = short
    gpu_rows = corr.gpu_rows
    out["kernels"] = {"count": len(kernel_rows), "total_us": kernel_total,
                      "by_class": class_times(batch, gpu_rows), "by_name": by_name}

    out["memcpy"] = {}
    memcpy = batch.kind == Kind.MEMCPY
    for mk in MemcpyKind:
        rows = np.flatnonzero(memcpy & (batch.subkind == mk))
        if len(rows) or mk != MemcpyKind.UNKNOWN:
            key = mk.name if mk != MemcpyKind.UNKNOWN else "unknown"
            out["memcpy"][key] = _transfer_stats(batch, rows)
    out["memset"] = _transfer_stats(batch, np.flatnonzero(batch.kind == Kind.MEMSET))

    api_rows = corr.launch_rows
    api_total = float(durations[api_rows].sum()) / 1e3
    out["runtime_api"] = [
        {"name": batch.strings[n], "calls": s.pop("count"), **s,
         "time_pct": 100.0 * s["total_us"] / api_total if api_total else 0.0}
        for n, s in group_durations(batch.name[api_rows], durations[api_rows])]

    sync_rows = np.flatnonzero(batch.kind == Kind.SYNC)
    by_kind = {}
    for sk in SyncKind:
        rows = sync_rows[batch.subkind[sync_rows] == sk]
        if len(rows):
            by_kind[sk.name.lower()] = describe_us(durations[rows])
    api = [dict(r, blocking=blocking_call(r["name"])) for r in out["runtime_api"]
           if r["name"] in SYNC_API or blocking_call(r["name"])]
    out["sync"] = {**describe_us(durations[sync_rows]), "by_kind": by_kind, "api": api,
                   "host_blocked_us": sum(r["total_us"] for r in api if r["blocking"])}

    matched = corr.matched
    launch_names = batch.name[corr.launch_of_gpu[matched]]
    ids, counts = np.unique(launch_names, return_counts=True)
    out["launch"] = {
        "matched_gpu_ops": int(matched.sum()), "orphan_gpu_ops": corr.orphan_count,
        "delay_us": percentiles_us(corr.delay_ns[matched]),
        "latency_us": percentiles_us(corr.latency_ns[matched]),
        "by_api": {batch.strings[i]: int(c) for i, c in zip(ids.tolist(), counts.tolist())},
    }

    depth = {(q.rank, q.device, q.stream): q.max_depth for q in queue_depths(batch, corr)}
    out["streams"] = [dict(s, max_queue_depth=depth.get((s["rank"], s["device"], s["stream"]), 0))
                      for s in idle_breakdown(batch, corr)]

    out["annotations"] = _by_name(batch, Kind.USER_ANNOTATION, durations)
    out["gpu_annotations"] = _by_name(batch, Kind.GPU_USER_ANNOTATION, durations)
    out["steps"] = _steps(batch)
    top = {"top_kernels": EVERY_KERNEL} if every_kernel else {}
    out["operators"] = operators(batch, corr, **top)
    if out["operators"]:
        out["operators"]["modules"] = modules(batch, corr, **top)
    out["memory"] = memory(batch, multi_rank=multi_rank)
    out["flops"] = flops_section(batch, corr, device_names or [], every_row=every_kernel)
    out["communication"] = empty_section() if multi_rank else communication(batch)  # multi: from the ranks'
    out["compiled"] = compiled(batch, corr)
    return out


def cut_top_kernels(table: dict[str, Any]) -> dict[str, Any]:
    """The operator table (``operators``, with its ``modules``) as built by default, from one built
    with ``top_kernels=EVERY_KERNEL``: each list of top kernels is sorted, so its first few are
    the default's."""
    def cut(rows: list[dict], top: int) -> list[dict]:
        return [dict(r, top_kernels=r["top_kernels"][:top]) for r in rows]

    if not table:
        return table
    out = dict(table, by_name=cut(table["by_name"], OPERATOR_TOP_KERNELS),
               regions=cut(table["regions"], OPERATOR_TOP_KERNELS))
    if table.get("modules"):
        out["modules"] = dict(table["modules"], by_path=cut(table["modules"]["by_path"], MODULE_TOP_KERNELS))
    return out


def kernel_shapes(batch: EventBatch) -> tuple[np.ndarray, np.ndarray]:
    """``stats.shape_counts`` of the batch's kernels by name (made once per batch)."""
    cached = batch.__dict__.get("_kernel_shapes")
    if cached is None:
        rows = np.flatnonzero(batch.kind == Kind.KERNEL)
        cached = batch.__dict__["_kernel_shapes"] = shape_counts(batch.name[rows], np.column_stack(
            [batch.columns[c][rows] for c in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")]))
    return cached


def _transfer_stats(batch: EventBatch, rows: np.ndarray) -> dict[str, Any]:
    durations = batch.duration_ns[rows]
    nbytes = batch.bytes[rows]
    total_bytes = int(nbytes[nbytes > 0].sum())
    stats = describe_us(durations)
    seconds = stats["total_us"] / 1e6
    return {**stats, "bytes": total_bytes,
            "throughput_gbps": total_bytes / seconds / 1e9 if seconds > 0 else 0.0}


def _by_name(batch: EventBatch, kind: Kind, durations: np.ndarray) -> list[dict]:
    rows = annotation_rows(batch, kind)
    return [{"name": batch.strings[n], "instances": s.pop("count"), **s}
            for n, s in group_durations(batch.name[rows], durations[rows])]


def _steps(batch: EventBatch) -> dict[str, Any]:
    rows = np.flatnonzero(batch.kind == Kind.STEP)
    numbers = batch.extra("step")
    items = sorted(
        ({"step": numbers.get(int(r), -1), "rank": int(batch.rank[r]),
          "start_ns": int(batch.start_ns[r]),
          "duration_us": float(batch.end_ns[r] - batch.start_ns[r]) / 1e3} for r in rows),
        key=lambda s: (s["rank"], s["start_ns"]))
    return {"count": len(items), "duration_us": percentiles_us(batch.duration_ns[rows]),
            "items": items}
