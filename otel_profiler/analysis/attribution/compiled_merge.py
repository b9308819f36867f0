"""The ``compiled`` sections of several ranks added up into the one ``compiled.compiled`` gives for
all of them at once (the cluster's merge): regions, kernels, graphs by name, summed; Dynamo's counts
summed and its compile ids joined."""

from __future__ import annotations

from typing import Any, Callable

from .compiled import id_order

_SUMMED = ("calls", "cpu_us", "self_cpu_us", "gpu_us", "extern_cpu_us", "kernel_cpu_us")


def _add_rows(into: dict[str, dict[str, Any]], rows: list[dict[str, Any]]) -> None:
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


def merge_compiled(sections: list[dict[str, Any]]) -> dict[str, Any]:
    """One ``compiled`` section of ``sections`` (each a rank's)."""
    regions: dict[str, dict[str, Any]] = {}
    parts: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}
    for s in sections:
        for r in s["regions"]:
            _add_rows(regions, [{k: v for k, v in r.items() if k not in ("kernels", "cpu_kernels", "graphs")}])
            for key in ("kernels", "cpu_kernels", "graphs"):
                _add_rows(parts.setdefault(r["name"], {}).setdefault(key, {}), r[key])
    rows = []
    for name, region in regions.items():
        for key, value in (("kernels", "gpu_us"), ("cpu_kernels", "cpu_us"), ("graphs", "cpu_us")):
            region[key] = sorted(parts[name].get(key, {}).values(), key=_by(value))
        rows.append(region)
    rows.sort(key=lambda r: (-r["gpu_us"], -r["cpu_us"], r["name"]))
    dynamo: dict[str, Any] = {"cache_lookups": {"count": 0, "cpu_us": 0.0},
                              "compiles": {"count": 0, "cpu_us": 0.0, "ids": []},
                              "recompilations": {"count": 0, "ids": []}}
    compile_ids: set[str] = set()
    recompiled: set[str] = set()
    for s in sections:
        d = s["dynamo"]
        for key in ("cache_lookups", "compiles"):
            dynamo[key]["count"] += d[key]["count"]
            dynamo[key]["cpu_us"] += d[key]["cpu_us"]
        compile_ids.update(d["compiles"]["ids"])
        recompiled.update(d["recompilations"]["ids"])
        if "python_us_in_regions" in d:
            dynamo["python_us_in_regions"] = dynamo.get("python_us_in_regions", 0.0) + d["python_us_in_regions"]
    dynamo["compiles"]["ids"] = sorted(compile_ids, key=id_order)
    dynamo["recompilations"] = {"count": len(recompiled), "ids": sorted(recompiled, key=id_order)}
    totals = {k: sum(s[k] for s in sections) for k in ("triton_gpu_us", "extern_gpu_us", "outside_gpu_us")}
    return {"regions": rows, **totals, "dynamo": dynamo}
