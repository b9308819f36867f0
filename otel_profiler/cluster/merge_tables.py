"""Merging the tables of rank partials: rows keyed by name with summed figures, top lists re-cut after
summing, sketch-backed statistics rows, and the operator and module views. Pure functions of the
partials' tables (no events), used by ``merge``."""

from __future__ import annotations

from typing import Any, Iterable

from ..analysis.attribution.modules import TOP_KERNELS as MODULE_TOP_KERNELS
from ..analysis.attribution.modules import _by_type, _tree_order
from ..analysis.attribution.operators import TOP_KERNELS, TOP_STACKS
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


class _RowFold:
    """Rows keyed by ``key`` with the numbers ``sums`` added as ranks come in; their top-kernel and
    call-stack lists kept whole (by kernel, by stack) until ``rows`` cuts them."""

    def __init__(self, key: str, sums: tuple[str, ...]) -> None:
        self.key, self.sums = key, sums
        self.rows: dict[Any, dict[str, Any]] = {}

    def add(self, rows: list[dict[str, Any]]) -> None:
        """A rank's rows added; the rows and their top-kernel entries are taken over, not copied
        (the rank's tables are not to be used after)."""
        for r in rows:
            tops, stacks = r.pop("top_kernels", ()), r.pop("call_stacks", ())
            self._merge(r[self.key], r, ((t["raw_name"], t) for t in tops),
                        ((tuple(c["stack"]), c["calls"]) for c in stacks))

    def absorb(self, other: "_RowFold") -> None:
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

    def result(self, top: int) -> list[dict[str, Any]]:
        out = []
        for m in self.rows.values():
            row = {f: v for f, v in m.items() if f not in ("_tops", "_stacks")}
            row["top_kernels"] = sorted((dict(t) for t in m["_tops"].values()), key=lambda t: -t["gpu_us"])[:top]
            if m["_stacks"]:
                row["call_stacks"] = [{"stack": list(st), "calls": c} for st, c in
                                      sorted(m["_stacks"].items(), key=lambda sc: -sc[1])[:TOP_STACKS]]
            out.append(row)
        return out


_OPERATOR_HEAD = ("count", "kernel_total_us", "attributed_us", "attributed_by", "unattributed")
_MODULE_HEAD = ("calls", "kernel_total_us", "attributed_us", "outside")


class OperatorFold:
    """The operator view (``analysis.attribution.operators``) and ``nn.Module`` view
    (``analysis.attribution.modules``) of many ranks, folded in one rank at a time from their uncut tables (``add``), cut to the summary's
    top lists at the end (``result``)."""

    def __init__(self) -> None:
        self.head: dict[str, Any] = {}
        self.by_name = _RowFold("name", ("calls", "total_cpu_us", "self_cpu_us", "self_gpu_us",
                                         "total_gpu_us", "kernels"))
        self.regions = _RowFold("key", ("kernels", "gpu_us"))
        self.module_head: dict[str, Any] = {}
        self.by_path = _RowFold("path", ("calls", "cpu_us", "self_gpu_us", "total_gpu_us", "kernels"))
        self.seen = False

    def add(self, ops: dict[str, Any]) -> None:
        if not ops:
            return
        self.seen = True
        self.head = sum_dicts([self.head, {k: ops[k] for k in _OPERATOR_HEAD}])
        self.by_name.add(ops["by_name"])
        self.regions.add([dict(r, key=(r["name"], r["kind"])) for r in ops["regions"]])
        mods = ops.get("modules") or {}
        if mods:
            self.module_head = sum_dicts([self.module_head, {k: mods[k] for k in _MODULE_HEAD}])
            self.by_path.add(mods["by_path"])

    def absorb(self, other: "OperatorFold") -> None:
        """Another fold's ranks added in (a worker's fold of its ranks)."""
        if not other.seen:
            return
        self.seen = True
        self.head = sum_dicts([self.head, other.head])
        self.by_name.absorb(other.by_name)
        self.regions.absorb(other.regions)
        if other.module_head:
            self.module_head = sum_dicts([self.module_head, other.module_head])
            self.by_path.absorb(other.by_path)

    def result(self) -> dict[str, Any]:
        if not self.seen:
            return {}
        out = dict(self.head)
        total = out["kernel_total_us"]
        by_name = self.by_name.result(TOP_KERNELS)
        for r in by_name:
            r["gpu_pct"] = 100.0 * r["self_gpu_us"] / total if total else 0.0
        by_name.sort(key=lambda r: (-r["self_gpu_us"], -r["total_gpu_us"], -r["total_cpu_us"], r["name"]))
        regions = self.regions.result(TOP_KERNELS)
        for r in regions:
            del r["key"]
        out.update(by_name=by_name, regions=sorted(regions, key=lambda r: -r["gpu_us"]))
        out["modules"] = {}
        if self.module_head:
            by_path = self.by_path.result(MODULE_TOP_KERNELS)
            out["modules"] = dict(self.module_head, by_path=_tree_order(by_path), by_type=_by_type(by_path))
        return out
