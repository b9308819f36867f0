"""Merging the tables of rank partials: rows keyed by name with summed figures, top lists re-cut after
summing, sketch-backed statistics rows, and the operator and module views. Pure functions of the
partials' tables (no events), used by ``merge``."""

from __future__ import annotations

from typing import Any, Iterable

from ..analysis.modules import TOP_KERNELS as MODULE_TOP_KERNELS
from ..analysis.modules import _by_type, _tree_order
from ..analysis.operators import TOP_KERNELS, TOP_STACKS
from .sketch import Sketch


def sum_dicts(dicts: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Key-wise sums of numbers (nested dicts summed the same way)."""
    out: dict[str, Any] = {}
    for d in dicts:
        for k, v in d.items():
            if isinstance(v, dict):
                out[k] = sum_dicts([out.get(k, {}), v])
            elif isinstance(v, (int, float)) and not isinstance(v, bool):
                out[k] = out.get(k, 0) + v
            else:
                out.setdefault(k, v)
    return out


def stat_rows(sketches: dict[str, Sketch], count_key: str) -> list[dict[str, Any]]:
    """``[{name, <count_key>, total_us, avg_us, med_us, min_us, max_us, std_us}]``, biggest total first."""
    rows = []
    for name, s in sketches.items():
        d = s.describe()
        rows.append({"name": name, count_key: d.pop("count"), **d})
    return sorted(rows, key=lambda r: (-r["total_us"], r["name"]))


def _top(lists: Iterable[list[dict]], key: str, sums: tuple[str, ...], order: str, top: int | None
         ) -> list[dict]:
    """Rows of several top lists merged by ``key`` (``sums`` added), the ``top`` biggest by ``order``
    (None: all of them)."""
    rows: dict[Any, dict] = {}
    for lst in lists:
        for r in lst:
            k = tuple(r[key]) if isinstance(r[key], list) else r[key]
            if k in rows:
                for s in sums:
                    rows[k][s] += r[s]
            else:
                rows[k] = dict(r)
    return sorted(rows.values(), key=lambda r: -r[order])[:top]


def _merge_rows(tables: Iterable[list[dict]], key: str, sums: tuple[str, ...]) -> dict[Any, dict]:
    rows: dict[Any, dict] = {}
    for table in tables:
        for r in table:
            if r[key] in rows:
                m = rows[r[key]]
                for s in sums:
                    m[s] += r[s]
                m["_tops"].append(r.get("top_kernels", []))
                m["_stacks"].append(r.get("call_stacks", []))
            else:
                rows[r[key]] = dict(r, _tops=[r.get("top_kernels", [])], _stacks=[r.get("call_stacks", [])])
    return rows


def _finish(row: dict, top: int | None) -> dict:
    tops, stacks = row.pop("_tops"), row.pop("_stacks")
    row["top_kernels"] = _top(tops, "raw_name", ("count", "gpu_us"), "gpu_us", top)
    if "call_stacks" in row:
        row["call_stacks"] = _top(stacks, "stack", ("calls",), "calls", TOP_STACKS)
    return row


def merge_operators(parts: list[dict[str, Any]], cut: bool = True) -> dict[str, Any]:
    """The operator view (``analysis.operators``) of several ranks from their uncut tables; top
    kernel lists cut to the summary's length, or left whole (``cut=False``: to merge more later)."""
    parts = [p for p in parts if p]
    if not parts:
        return {}
    out = sum_dicts({k: p[k] for k in ("count", "kernel_total_us", "attributed_us", "attributed_by",
                                        "unattributed")} for p in parts)
    total = out["kernel_total_us"]
    rows = _merge_rows((p["by_name"] for p in parts), "name",
                       ("calls", "total_cpu_us", "self_cpu_us", "self_gpu_us", "total_gpu_us", "kernels"))
    by_name = [_finish(r, TOP_KERNELS if cut else None) for r in rows.values()]
    for r in by_name:
        r["gpu_pct"] = 100.0 * r["self_gpu_us"] / total if total else 0.0
    by_name.sort(key=lambda r: (-r["self_gpu_us"], -r["total_gpu_us"], -r["total_cpu_us"], r["name"]))
    regions = _merge_rows(([dict(r, key=(r["name"], r["kind"])) for r in p["regions"]] for p in parts),
                          "key", ("kernels", "gpu_us"))
    region_rows = [_finish(r, TOP_KERNELS if cut else None) for r in regions.values()]
    for r in region_rows:
        del r["key"]
    out.update(by_name=by_name, regions=sorted(region_rows, key=lambda r: -r["gpu_us"]))
    out["modules"] = merge_modules([p.get("modules") or {} for p in parts], cut)
    return out


def merge_modules(parts: list[dict[str, Any]], cut: bool = True) -> dict[str, Any]:
    """The ``nn.Module`` view (``analysis.modules``) of several ranks from their uncut tables."""
    parts = [p for p in parts if p]
    if not parts:
        return {}
    out = sum_dicts({k: p[k] for k in ("calls", "kernel_total_us", "attributed_us", "outside")}
                    for p in parts)
    rows = _merge_rows((p["by_path"] for p in parts), "path",
                       ("calls", "cpu_us", "self_gpu_us", "total_gpu_us", "kernels"))
    by_path = [_finish(r, MODULE_TOP_KERNELS if cut else None) for r in rows.values()]
    out.update(by_path=_tree_order(by_path), by_type=_by_type(by_path))
    return out

