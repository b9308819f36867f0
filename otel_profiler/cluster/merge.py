"""The reduce step: rank partials merged into the summary document ``otel-profiler summary`` builds
for the same ranks (``analysis.summary``), with the cluster's own sections added: ``clock_alignment``
(``align``) and ``stragglers`` (``stragglers``).

Exact: every count, total, mean, minimum, maximum, byte count, per-device, per-stream, per-step and
per-rank figure, and the operator and module tables. From sketches (``sketch.RELATIVE_ACCURACY``,
0.5 %): medians and p50/p90/p99 of kernels, copies, API calls, annotations, synchronization and launch
delay; standard deviations are exact up to float rounding. ``insights``: each rank's findings (one
row per rule, naming how many ranks it holds for) and the straggler findings.
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np

from ..analysis.attribution.compiled_merge import merge_compiled
from ..analysis.breakdown import KERNEL_CLASSES
from ..analysis.communication import empty_section, merge_ranks
from ..analysis.flops.result import flops_result, merge_figures
from ..analysis.platform import SYNC_API, blocking_call
from ..analysis.stats import percentiles_us, time_stats
from ..analysis.summary import complete
from ..analysis.summary_schema import (SCHEMA, AnnotationRow, ApiRow, ComputeHost, Insight, KernelRow, Kernels,
                                       Steps, Summary, SyncApiRow, TimeSections, TransferStats, WindowKey)
from ..analysis.summary_schema.sections import Memory
from ..names import demangle, short_names
from .merge_tables import OperatorFold, stat_rows, sum_dicts
from .partial import RankFigures, RankPartial, is_url
from .sections import LazyRanks, SectionFile
from .sketch import Sketch, merged

SEVERITY = {"high": 0, "medium": 1, "low": 2}


class Reduction:
    """Partials folded in as they arrive (``add``); the document built once at the end
    (``document``). Sketches, kernel classes and operator tables are merged and dropped at once, so
    what is held per rank is its metadata, its light figures, steps and collectives, and its
    compressed section (with ``spill``, the client's way: in a ``SectionFile`` on disk)."""

    def __init__(self, spill: bool = False) -> None:
        self.partials: list[RankPartial] = []
        self.sketches: dict[str, dict[str, Sketch]] = {}
        self.geometry: dict[str, dict[tuple, int]] = {}
        self.kernel_classes: dict[str, str] = {}
        self.operators = OperatorFold()
        self.sections = SectionFile() if spill else None

    def add(self, p: RankPartial) -> None:
        self._fold(p.sketches, p.geometry, p.figures.pop("kernel_classes", {}))
        self.operators.add(p.operators)
        p.drop_tables()
        self._keep(p)

    def absorb(self, other: "Reduction") -> None:
        """Another reduction's ranks added after these (a worker's fold of a run of inputs)."""
        self._fold(other.sketches, other.geometry, other.kernel_classes)
        self.operators.absorb(other.operators)
        for p in other.partials:
            self._keep(p)

    def compact(self) -> None:
        """Each sketch's merged-in buckets added up (``Sketch.compact``): a worker's fold is handed
        on with one bucket table per sketch, however many ranks it holds."""
        for table in self.sketches.values():
            for s in table.values():
                s.compact()

    def _fold(self, sketches: dict[str, dict[str, Sketch]], geometry: dict[str, dict[tuple, int]],
              classes: dict[str, str]) -> None:
        for key, table in sketches.items():
            merged(self.sketches.setdefault(key, {}), table)
        for name, counts in geometry.items():
            g = self.geometry.setdefault(name, {})
            for shape, c in counts.items():
                g[shape] = g.get(shape, 0) + c
        self.kernel_classes.update(classes)

    def _keep(self, p: RankPartial) -> None:
        if self.sections is not None and p.section_json:
            self.sections.put(str(p.rank), p.section_json)
            p.section_json = b""
        self.partials.append(p)

    def document(self, sources: list[str]) -> Summary:
        """The summary document of the ranks added (in the order added), read from ``sources``."""
        partials = self.partials
        multi = len({p.rank for p in partials}) > 1
        devices = [d for p in partials for d in p.meta.get("devices") or [] if isinstance(d, str) and d]
        out: Summary = {
            "schema": SCHEMA, "sources": list(sources), "platform": _platform(partials),
            "ranks_meta": [p.meta for p in partials],
            **_figures(partials, self.sketches, self.geometry, self.kernel_classes, multi),
            "operators": self.operators.result(),
            "memory": _memory(partials, multi),
            "flops": flops_result(merge_figures([p.figures["flops"] for p in partials]), list(dict.fromkeys(devices))),
            "compiled": merge_compiled([p.figures["compiled"] for p in partials]),
            "communication": (merge_ranks({str(p.rank): p.figures["communication"] for p in partials}) if multi
                              else partials[0].figures["communication"] if partials else empty_section()),
            "compute": _compute(partials),
            "cpu": {k: v for p in partials for k, v in p.cpu.items()},
            "notes": []}  # ``complete`` writes them
        complete(out, [s for s in sources if not is_url(s)])
        if multi:
            out["ranks"] = LazyRanks(self.sections if self.sections is not None else
                                     {str(p.rank): p.section_json for p in partials})
        out["insights"] = rank_insights(partials)
        return out


def merge(partials: list[RankPartial], sources: list[str]) -> Summary:
    """The summary document of ``partials`` (in input order), read from ``sources``."""
    reduction = Reduction()
    for p in partials:
        reduction.add(p)
    return reduction.document(sources)


def _platform(partials: list[RankPartial]) -> str:
    found = [p.platform for p in partials if p.platform != "unknown"]
    return found[0] if found else "unknown"


def _compute(partials: list[RankPartial]) -> list[ComputeHost]:
    by_host: dict[str, ComputeHost] = {}
    for p in partials:
        for entry in p.compute:
            key = entry.get("host") or f"rank {p.rank}"
            if key in by_host:
                by_host[key]["ranks"].extend(entry["ranks"])
            else:
                by_host[key] = {**entry, "ranks": list(entry["ranks"])}
    return list(by_host.values())


Value = TypeVar("Value")


def _keyed(p: RankPartial, table: dict[str, Value], multi: bool) -> dict[str, Value]:
    return {f"{p.rank}:{k}" if multi else k: v for k, v in table.items()}


def _figures(partials: list[RankPartial], sk: dict[str, dict[str, Sketch]],
             geometry: dict[str, dict[tuple, int]], classes: dict[str, str], multi: bool) -> TimeSections:
    sections = [p.figures for p in partials]
    window: WindowKey = {}
    windows = [s["window_us"] for s in sections if "window_us" in s]
    if windows:
        start, end = min(w["start_ns"] for w in windows), max(w["end_ns"] for w in windows)
        window["window_us"] = {"start_ns": start, "end_ns": end, "span_us": float(end - start) / 1e3}
    runtime = stat_rows(sk["runtime_api"])
    api_total = sum(d["total_us"] for _, d in runtime)
    runtime_api: list[ApiRow] = [{"name": name, "calls": d["count"], **time_stats(d),
                                  "time_pct": 100.0 * d["total_us"] / api_total if api_total else 0.0}
                                 for name, d in runtime]
    api: list[SyncApiRow] = [{**r, "blocking": blocking_call(r["name"])} for r in runtime_api
                             if r["name"] in SYNC_API or blocking_call(r["name"])]
    launches = [s["launch"] for s in sections]
    return {
        "events": sum_dicts(s["events"] for s in sections), **window,
        "devices": {k: v for p in partials for k, v in _keyed(p, p.figures["devices"], multi).items()},
        "kernels": _kernels(partials, sk["kernels"], geometry, classes),
        "memcpy": {key: _transfer(s, sum(x["memcpy"][key]["bytes"] for x in sections if key in x["memcpy"]))
                   for key, s in sk["memcpy"].items()},
        "memset": _transfer(sk["memset"][""], sum(x["memset"]["bytes"] for x in sections)),
        "runtime_api": runtime_api,
        "sync": {**sk["sync"][""].describe(),
                 "by_kind": {k: s.describe() for k, s in sk["sync_kinds"].items()}, "api": api,
                 "host_blocked_us": sum(r["total_us"] for r in api if r["blocking"])},
        "launch": {"matched_gpu_ops": sum(x["matched_gpu_ops"] for x in launches),
                   "orphan_gpu_ops": sum(x["orphan_gpu_ops"] for x in launches),
                   "delay_us": sk["launch"]["delay_us"].percentiles(),
                   "latency_us": sk["launch"]["latency_us"].percentiles(),
                   "by_api": sum_dicts(x["by_api"] for x in launches)},
        "streams": sorted((s for x in sections for s in x["streams"]),
                          key=lambda s: (s["rank"], s["device"], s["stream"])),
        "annotations": _annotations(sk["annotations"]),
        "gpu_annotations": _annotations(sk["gpu_annotations"]),
        "steps": _steps(sections),
    }


def _annotations(sketches: dict[str, Sketch]) -> list[AnnotationRow]:
    return [{"name": name, "instances": d["count"], **time_stats(d)} for name, d in stat_rows(sketches)]


def _kernels(partials: list[RankPartial], sketches: dict[str, Sketch],
             geometry: dict[str, dict[tuple, int]], classes: dict[str, str]) -> Kernels:
    total = sum(s.total for s in sketches.values())
    rows = stat_rows(sketches)
    raws = [raw for raw, _ in rows]
    by_name: list[KernelRow] = []
    for (raw, d), short in zip(rows, short_names(raws)):
        shapes = geometry.get(raw, {})
        best = min(shapes, key=lambda g: (-shapes[g], g)) if shapes else None
        by_name.append({"name": demangle(raw), "raw_name": raw, "class": classes[raw],
                        "instances": d["count"], **time_stats(d),
                        "time_pct": 100.0 * d["total_us"] / total if total else 0.0,
                        "grid": list(best[:3]) if best else None, "block": list(best[3:]) if best else None,
                        "launch_configs": len(shapes), "short_name": short})
    by_class = sum_dicts(p.figures["by_class"] for p in partials)
    return {"count": sum(s.count for s in sketches.values()), "total_us": total,
            "by_class": {c: by_class.get(c, 0.0) for c in KERNEL_CLASSES}, "by_name": by_name}


def _transfer(s: Sketch, total_bytes: int) -> TransferStats:
    stats = s.describe()
    seconds = stats["total_us"] / 1e6
    return {**stats, "bytes": total_bytes,
            "throughput_gbps": total_bytes / seconds / 1e9 if seconds > 0 else 0.0}


def _steps(sections: list[RankFigures]) -> Steps:
    items = sorted((i for s in sections for i in s["steps"]["items"]),
                   key=lambda s: (s["rank"], s["start_ns"]))
    durations = np.array([round(i["duration_us"] * 1e3) for i in items], np.int64)
    return {"count": len(items), "duration_us": percentiles_us(durations), "items": items}


def _memory(partials: list[RankPartial], multi: bool) -> Memory:
    out: Memory = {"events": 0, "devices": {}}
    for p in partials:
        m = p.figures["memory"]
        out["events"] += m.get("events", 0)
        out["devices"].update(_keyed(p, m.get("devices", {}), multi))
        if "host" in m:
            out.setdefault("host", {}).update(_keyed(p, m["host"], multi))
    return out


def rank_insights(partials: list[RankPartial]) -> list[Insight]:
    """Each rank's findings, one row per rule: the most severe rank's finding, its scope naming how
    many ranks it holds for."""
    by_rule: dict[str, tuple[Insight, list[int]]] = {}
    for p in partials:
        for found in p.insights:
            rule = found["rule"]
            if rule not in by_rule:
                by_rule[rule] = ({**found, "scope": f"rank {p.rank}: {found['scope']}"}, [p.rank])
                continue
            best, ranks = by_rule[rule]
            ranks.append(p.rank)
            if SEVERITY[found["severity"]] < SEVERITY[best["severity"]]:
                by_rule[rule] = ({**found, "scope": f"rank {p.rank}: {found['scope']}"}, ranks)
    out = []
    n = len({p.rank for p in partials})
    for found, ranks in by_rule.values():
        if n > 1:
            found["scope"] += f" (found on {len(set(ranks))} of {n} ranks)"
        out.append(found)
    return sorted(out, key=lambda i: SEVERITY[i["severity"]])
