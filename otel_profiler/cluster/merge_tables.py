"""Merging the tables of rank partials: rows keyed by name with summed figures, top lists re-cut after
summing, sketch-backed statistics rows, and the operator and module views. Pure functions of the
partials' tables (no events), used by ``merge``."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from operator import itemgetter
from typing import Any, Generic, TypeVar, cast

from ..analysis.attribution.modules import TOP_KERNELS as MODULE_TOP_KERNELS
from ..analysis.attribution.modules import _by_type, _tree_order
from ..analysis.attribution.operators import TOP_KERNELS, TOP_STACKS
from ..analysis.summary_schema import DurationStats
from ..analysis.summary_schema.sections import (ModuleRow, Modules, OperatorRow, Operators, OperatorTotals,
                                         RegionRow)
from .sketch import Sketch

Summed = TypeVar("Summed", bound=Mapping[str, Any])
Row = TypeVar("Row", bound=Mapping[str, Any])


def sum_dicts(dicts: Iterable[Summed]) -> Summed:
    """Key-wise sums of numbers (nested dicts summed the same way), other values as the first dict
    holding them gives them: the dicts' own shape (built key by key, hence the cast)."""
    out: dict[str, Any] = {}
    for d in dicts:
        for k, v in d.items():
            if isinstance(v, dict):
                out[k] = sum_dicts([out.get(k, {}), v])
            elif isinstance(v, (int, float)) and not isinstance(v, bool):
                out[k] = out.get(k, 0) + v
            else:
                out.setdefault(k, v)
    return cast(Summed, out)


def _added(total: Summed | None, part: Summed) -> Summed:
    """``part`` added to ``total`` (None: nothing added yet) with ``sum_dicts``."""
    return sum_dicts([part] if total is None else [total, part])


def stat_rows(sketches: dict[str, Sketch]) -> list[tuple[str, DurationStats]]:
    """``(name, describe_us's figures)`` per sketch, biggest total first."""
    rows = [(name, s.describe()) for name, s in sketches.items()]
    return sorted(rows, key=lambda r: (-r[1]["total_us"], r[0]))


class _RowFold(Generic[Row]):
    """Rows keyed by ``key`` with the numbers ``sums`` added as ranks come in; their top-kernel and
    call-stack lists kept whole (by kernel, by stack) until ``rows`` cuts them. The rows are kept as
    plain dicts (with the fold's own ``_tops`` and ``_stacks``) and handed back as the kind of row
    they came in as, with the same keys."""

    def __init__(self, key: Callable[[Row], Hashable], sums: tuple[str, ...]) -> None:
        """``key``: a row's key (an ``itemgetter``: folds travel between processes, pickled)."""
        self.key, self.sums = key, sums
        self.rows: dict[Any, dict[str, Any]] = {}

    def add(self, rows: Iterable[Row]) -> None:
        """A rank's rows added; their top-kernel entries are taken over, not copied (the rank's
        tables are not to be used after)."""
        for row in rows:
            r = dict(row)
            tops, stacks = r.pop("top_kernels", ()), r.pop("call_stacks", ())
            self._merge(self.key(row), r, ((t["raw_name"], t) for t in tops),
                        ((tuple(c["stack"]), c["calls"]) for c in stacks))

    def absorb(self, other: "_RowFold[Row]") -> None:
        """Another fold's rows added in (a worker's fold of its ranks), as ``add`` would add them;
        ``other``'s rows are taken over, not copied (it is empty after)."""
        for k, o in other.rows.items():
            if k not in self.rows:
                self.rows[k] = o
            else:
                self._merge(k, o, o["_tops"].items(), o["_stacks"].items())
        other.rows = {}

    def _merge(self, k: Any, fields: dict[str, Any], tops: Iterable[tuple[str, dict[str, Any]]],
               stacks: Iterable[tuple[tuple, int]]) -> None:
        """Row ``k``'s sums, top kernels (by raw name) and call stacks with these added."""
        m = self.rows.get(k)
        if m is None:
            m = self.rows[k] = fields
            m["_tops"], m["_stacks"] = {}, {}
        else:
            for f in self.sums:
                m[f] += fields[f]
        have_tops, have_stacks = m["_tops"], m["_stacks"]
        for name, t in tops:
            have = have_tops.get(name)
            if have is None:
                have_tops[name] = t
            else:
                have["count"] += t["count"]
                have["gpu_us"] += t["gpu_us"]
        for stack, calls in stacks:
            have_stacks[stack] = have_stacks.get(stack, 0) + calls

    def result(self, top: int) -> list[Row]:
        out = []
        for m in self.rows.values():
            row = {f: v for f, v in m.items() if f not in ("_tops", "_stacks")}
            row["top_kernels"] = sorted((dict(t) for t in m["_tops"].values()), key=lambda t: -t["gpu_us"])[:top]
            if m["_stacks"]:
                row["call_stacks"] = [{"stack": list(st), "calls": c} for st, c in
                                      sorted(m["_stacks"].items(), key=lambda sc: -sc[1])[:TOP_STACKS]]
            out.append(row)
        return cast(list[Row], out)


def _operator_totals(ops: Operators) -> OperatorTotals:
    return {"count": ops["count"], "kernel_total_us": ops["kernel_total_us"], "attributed_us": ops["attributed_us"],
            "attributed_by": ops["attributed_by"], "unattributed": ops["unattributed"]}


def _module_totals(mods: Modules) -> Modules:
    return {"calls": mods["calls"], "kernel_total_us": mods["kernel_total_us"],
            "attributed_us": mods["attributed_us"], "outside": mods["outside"]}


class OperatorFold:
    """The operator view (``analysis.attribution.operators``) and ``nn.Module`` view
    (``analysis.attribution.modules``) of many ranks, folded in one rank at a time from their uncut tables (``add``), cut to the summary's
    top lists at the end (``result``)."""

    def __init__(self) -> None:
        self.head: OperatorTotals | None = None
        self.by_name: _RowFold[OperatorRow] = _RowFold(
            itemgetter("name"), ("calls", "total_cpu_us", "self_cpu_us", "self_gpu_us", "total_gpu_us", "kernels"))
        self.regions: _RowFold[RegionRow] = _RowFold(itemgetter("name", "kind"), ("kernels", "gpu_us"))
        self.module_head: Modules | None = None
        self.by_path: _RowFold[ModuleRow] = _RowFold(
            itemgetter("path"), ("calls", "cpu_us", "self_gpu_us", "total_gpu_us", "kernels"))

    def add(self, ops: Operators | None) -> None:
        if not ops:
            return
        self.head = _added(self.head, _operator_totals(ops))
        self.by_name.add(ops["by_name"])
        self.regions.add(ops["regions"])
        mods = ops.get("modules") or {}
        if mods:
            self.module_head = _added(self.module_head, _module_totals(mods))
            self.by_path.add(mods["by_path"])

    def absorb(self, other: "OperatorFold") -> None:
        """Another fold's ranks added in (a worker's fold of its ranks)."""
        if other.head is None:
            return
        self.head = _added(self.head, other.head)
        self.by_name.absorb(other.by_name)
        self.regions.absorb(other.regions)
        if other.module_head:
            self.module_head = _added(self.module_head, other.module_head)
            self.by_path.absorb(other.by_path)

    def result(self) -> Operators:
        """The merged view; raises ``ValueError`` when no rank's table was added (every rank's
        summary has one: no ranks)."""
        if self.head is None:
            raise ValueError("no operator table was added")
        total = self.head["kernel_total_us"]
        by_name = self.by_name.result(TOP_KERNELS)
        for r in by_name:
            r["gpu_pct"] = 100.0 * r["self_gpu_us"] / total if total else 0.0
        by_name.sort(key=lambda r: (-r["self_gpu_us"], -r["total_gpu_us"], -r["total_cpu_us"], r["name"]))
        regions = self.regions.result(TOP_KERNELS)
        modules: Modules = {}
        if self.module_head:
            by_path = self.by_path.result(MODULE_TOP_KERNELS)
            modules = {**self.module_head, "by_path": _tree_order(by_path), "by_type": _by_type(by_path)}
        return {**self.head, "by_name": by_name, "regions": sorted(regions, key=lambda r: -r["gpu_us"]),
                "modules": modules}
