"""The ``compiled`` sections of several ranks added up into the one ``compiled.compiled`` gives for
all of them at once (the cluster's merge): regions, kernels, graphs by name, summed; Dynamo's counts
summed and its compile ids joined."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Callable, cast

from ..summary_schema.sections import Compiled, CompiledRegion, Dynamo
from .compiled import id_order

_SUMMED = ("calls", "cpu_us", "self_cpu_us", "gpu_us", "extern_cpu_us", "kernel_cpu_us")
_PARTS = (("kernels", "gpu_us"), ("cpu_kernels", "cpu_us"), ("graphs", "cpu_us"))
"""A region's lists of rows, and the figure each is ordered by."""
_PART_NAMES = tuple(key for key, _ in _PARTS)


def _add_rows(into: dict[str, dict[str, Any]], rows: Iterable[Mapping[str, Any]]) -> None:
    for r in rows:
        m = into.get(r["name"])
        if m is None:
            into[r["name"]] = dict(r)
        else:
            for k in _SUMMED:
                if k in r:
                    m[k] += r[k]


def _by(value: str) -> Callable[[dict[str, Any]], tuple[float, str]]:
    """The order of a region's kernels or graphs: most ``value`` first, then by name."""
    return lambda r: (-r[value], r["name"])


def merge_compiled(sections: list[Compiled]) -> Compiled:
    """One ``compiled`` section of ``sections`` (each a rank's)."""
    # Regions and their rows of three kinds are added up by key name, as plain dicts; each row
    # keeps the keys of its kind, so the merged rows are the section's rows again (the cast).
    regions: dict[str, dict[str, Any]] = {}
    parts: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for s in sections:
        for region in s["regions"]:
            r: Mapping[str, Any] = region
            _add_rows(regions, [{k: v for k, v in r.items() if k not in _PART_NAMES}])
            for key in _PART_NAMES:
                _add_rows(parts.setdefault(r["name"], {}).setdefault(key, {}), r[key])
    rows = []
    for name, merged in regions.items():
        for key, value in _PARTS:
            merged[key] = sorted(parts[name].get(key, {}).values(), key=_by(value))
        rows.append(merged)
    rows.sort(key=lambda r: (-r["gpu_us"], -r["cpu_us"], r["name"]))
    return {"regions": cast(list[CompiledRegion], rows),
            "triton_gpu_us": sum(s["triton_gpu_us"] for s in sections),
            "extern_gpu_us": sum(s["extern_gpu_us"] for s in sections),
            "outside_gpu_us": sum(s["outside_gpu_us"] for s in sections),
            "dynamo": _merge_dynamo([s["dynamo"] for s in sections])}


def _merge_dynamo(parts: list[Dynamo]) -> Dynamo:
    """Dynamo's counts and times summed, its compile ids joined."""
    dynamo: Dynamo = {"cache_lookups": {"count": 0, "cpu_us": 0.0},
                      "compiles": {"count": 0, "cpu_us": 0.0, "ids": []},
                      "recompilations": {"count": 0, "ids": []}}
    compile_ids: set[str] = set()
    recompiled: set[str] = set()
    for d in parts:
        for total, counted in ((dynamo["cache_lookups"], d["cache_lookups"]), (dynamo["compiles"], d["compiles"])):
            total["count"] += counted["count"]
            total["cpu_us"] += counted["cpu_us"]
        compile_ids.update(d["compiles"]["ids"])
        recompiled.update(d["recompilations"]["ids"])
        if "python_us_in_regions" in d:
            dynamo["python_us_in_regions"] = dynamo.get("python_us_in_regions", 0.0) + d["python_us_in_regions"]
    dynamo["compiles"]["ids"] = sorted(compile_ids, key=id_order)
    dynamo["recompilations"] = {"count": len(recompiled), "ids": sorted(recompiled, key=id_order)}
    return dynamo
