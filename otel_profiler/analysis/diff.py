"""Run-vs-run comparison: the difference of two summaries (``summary_schema.Summary``), the JSON contract
behind ``otel-profiler diff BASE NEW``.

Every compared figure is ``{"base": b, "new": n, "delta": n - b, "pct": 100 * (n - b) / b}`` (``pct``
is ``null`` when ``b`` is 0); a figure one side lacks counts as 0 there. Times in µs, sizes in bytes.

Shape::

    {"schema": "otel-profiler.diff/1", "base": {sources, platform}, "new": {sources, platform},
     "steps": {count, p50_us, mean_us, max_us: <figure>},
     "devices": {device: {span_us, busy_us, idle_us, idle_pct, compute_us, compute_pct,
                          non_compute_us, non_compute_pct: <figure>}},
     "kernel_classes": {compute|communication|memory: <figure>},
     "kernels": {count, total_us: <figure>,
                 by_name: [{name, raw_name, short_name, status: added|removed|changed|same,
                            total_us, instances, avg_us: <figure>}]},
     "launch": {delay_us|latency_us: {p50, p90, p99, mean: <figure>}, matched_gpu_ops: <figure>},
     "memcpy": {direction|Memset: {count, bytes, total_us: <figure>}},
     "memory": {device: {peak_allocated_bytes, peak_reserved_bytes: <figure>}},
     "operators": [{name, status, calls, self_gpu_us, total_gpu_us, self_cpu_us: <figure>}],
     "modules": [{type, status, calls, self_gpu_us, cpu_us: <figure>}]}   # nn.Module classes

Devices pair by key (two single-device runs on different devices pair as ``"<base>/<new>"``).
Rows of ``kernels.by_name`` (keyed by the recorded name), ``operators`` (keyed by name) and
``modules`` (``operators.modules.by_type``, keyed by module class; empty without module events) are ordered
by the size of the time change, largest first. A row is ``added`` when only NEW has it, ``removed``
when only BASE has it, ``changed`` when its time or count differ, else ``same``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .summary_schema import Summary, TransferStats

SCHEMA = "otel-profiler.diff/1"
DEVICE_FIELDS = ("span_us", "busy_us", "idle_us", "idle_pct", "compute_us", "compute_pct",
                 "non_compute_us", "non_compute_pct")


def figure(base: float | None, new: float | None) -> dict[str, Any]:
    b, n = base or 0, new or 0
    return {"base": b, "new": n, "delta": n - b, "pct": 100.0 * (n - b) / b if b else None}


def _fields(base: Mapping[str, Any] | None, new: Mapping[str, Any] | None, fields: tuple[str, ...]
            ) -> dict[str, dict]:
    base, new = base or {}, new or {}
    return {f: figure(base.get(f), new.get(f)) for f in fields}


def _keyed(base: Mapping[str, Mapping[str, Any]], new: Mapping[str, Mapping[str, Any]], fields: tuple[str, ...]
           ) -> dict[str, dict]:
    return {k: _fields(base.get(k), new.get(k), fields) for k in [*base, *(k for k in new if k not in base)]}


def _rows(base: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]], key: str, fields: tuple[str, ...],
          time: str, keep: tuple[str, ...] = ()) -> list[dict]:
    """Rows matched by ``key``, each field a figure, ``status`` set, by time change then name."""
    b, n = {r[key]: r for r in base}, {r[key]: r for r in new}
    out = []
    for k in [*b, *(k for k in n if k not in b)]:
        rb, rn = b.get(k), n.get(k)
        present: Mapping[str, Any] = rn or rb or {}  # one of the two has the key
        row: dict[str, Any] = {c: present.get(c) for c in (key, *keep)}
        row.update(_fields(rb, rn, fields))
        row["status"] = ("added" if rb is None else "removed" if rn is None else
                         "changed" if any(row[f]["delta"] for f in fields) else "same")
        out.append(row)
    out.sort(key=lambda r: (-abs(r[time]["delta"]), -r[time]["new"], str(r[key])))
    return out


def _memcpy(summary: Summary) -> dict[str, TransferStats]:
    return {**summary.get("memcpy", {}), "Memset": summary.get("memset", {})}


def _steps(summary: Summary) -> dict[str, float | None]:
    steps = summary.get("steps") or {}
    d = steps.get("duration_us") or {}
    return {"count": steps.get("count", 0), "p50_us": d.get("p50"), "mean_us": d.get("mean"),
            "max_us": d.get("max")}


def _memory(summary: Summary) -> dict[str, dict[str, int | None]]:
    devices = (summary.get("memory") or {}).get("devices") or {}
    return {k: {"peak_allocated_bytes": v.get("peak", {}).get("allocated_bytes"),
                "peak_reserved_bytes": v.get("peak_reserved_bytes")} for k, v in devices.items()}


def _paired(base: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """Per-device figures keyed alike; two single-device runs on different devices are paired under
    one key, ``"<base device>/<new device>"``."""
    if len(base) == 1 and len(new) == 1 and set(base) != set(new):
        key = f"{next(iter(base))}/{next(iter(new))}"
        return {key: next(iter(base.values()))}, {key: next(iter(new.values()))}
    return base, new


def diff(base: Summary, new: Summary) -> dict[str, Any]:
    """The comparison of two summaries (see the module docstring)."""
    kb, kn = base["kernels"], new["kernels"]
    lb: Mapping[str, Any] = base["launch"]  # read by name, as any summary file may lack a figure
    ln: Mapping[str, Any] = new["launch"]
    launch = {m: _fields(lb.get(m), ln.get(m), ("p50", "p90", "p99", "mean")) for m in ("delay_us", "latency_us")}
    launch["matched_gpu_ops"] = figure(base["launch"]["matched_gpu_ops"], new["launch"]["matched_gpu_ops"])
    ob, on = base.get("operators") or {}, new.get("operators") or {}
    return {
        "schema": SCHEMA,
        "base": {"sources": base.get("sources", []), "platform": base.get("platform")},
        "new": {"sources": new.get("sources", []), "platform": new.get("platform")},
        "steps": _fields(_steps(base), _steps(new), ("count", "p50_us", "mean_us", "max_us")),
        "devices": _keyed(*_paired(base["devices"], new["devices"]), DEVICE_FIELDS),
        "kernel_classes": _fields(kb["by_class"], kn["by_class"], ("compute", "communication", "memory")),
        "kernels": {"count": figure(kb["count"], kn["count"]),
                    "total_us": figure(kb["total_us"], kn["total_us"]),
                    "by_name": _rows(kb["by_name"], kn["by_name"], "raw_name",
                                     ("total_us", "instances", "avg_us"), "total_us",
                                     keep=("name", "short_name", "class"))},
        "launch": launch,
        "memcpy": _keyed(_memcpy(base), _memcpy(new), ("count", "bytes", "total_us")),
        "memory": _keyed(_memory(base), _memory(new), ("peak_allocated_bytes", "peak_reserved_bytes")),
        "operators": _rows(ob.get("by_name", []), on.get("by_name", []), "name",
                           ("calls", "self_gpu_us", "total_gpu_us", "self_cpu_us"), "self_gpu_us"),
        "modules": _rows((ob.get("modules") or {}).get("by_type", []), (on.get("modules") or {}).get("by_type", []),
                         "type", ("calls", "self_gpu_us", "cpu_us"), "self_gpu_us"),
    }


NO_GPU_NOTE = "no GPU activity in either profile: the GPU sections and columns are left out"


def has_gpu(d: dict) -> bool:
    """Whether either profile of the comparison recorded GPU work."""
    k = d["kernels"]
    copies = any(v["count"]["base"] or v["count"]["new"] for v in d["memcpy"].values())
    return bool(d["devices"]) or bool(k["count"]["base"] or k["count"]["new"]) or copies


def tables(d: dict, top: int = 20) -> list[tuple[str, tuple[str, ...], list[tuple]]]:
    """The comparison as (title, header, rows) tables, in reading order, for text and CSV. Without
    GPU work in either profile (``has_gpu``), the GPU tables and columns are left out."""
    gpu = has_gpu(d)

    def fig(label: str, f: dict) -> tuple:
        return (label, f["base"], f["new"], f["delta"], "-" if f["pct"] is None else f"{f['pct']:+.1f}%")

    head: tuple[str, ...] = ("Figure", "Base", "New", "Delta", "Change")
    out: list[tuple[str, tuple[str, ...], list[tuple]]] = [("Steps", head, [fig(k, v) for k, v in d["steps"].items()])]
    if not gpu:
        return out + _cpu_tables(d, top)
    out.append(("GPU temporal breakdown (per device)", head,
                [fig(f"{dev} {k}", v) for dev, fields in d["devices"].items() for k, v in fields.items()]))
    out.append(("GPU time by kernel class (us)", head,
                [fig("kernels total_us", d["kernels"]["total_us"]), fig("kernels count", d["kernels"]["count"]),
                 *(fig(k, v) for k, v in d["kernel_classes"].items())]))
    for title, rows, label in (("Kernels", d["kernels"]["by_name"], "short_name"),
                               ("Operators", d["operators"], "name"),
                               ("nn.Module classes", d.get("modules", []), "type")):
        if title.startswith("nn.") and not rows:
            continue
        out.append(_changes(title, rows, label, top))
    out.append(("Launch delay and latency (us)", head,
                [fig(f"{m} {p}", v) for m in ("delay_us", "latency_us") for p, v in d["launch"][m].items()]
                + [fig("matched_gpu_ops", d["launch"]["matched_gpu_ops"])]))
    out.append(("Memory copies and sets", head,
                [fig(f"{op} {k}", v) for op, fields in d["memcpy"].items() for k, v in fields.items()
                 if v["base"] or v["new"]]))
    out.append(("GPU memory peak (bytes)", head,
                [fig(f"{dev} {k}", v) for dev, fields in d["memory"].items() for k, v in fields.items()]))
    return out


def _changes(title: str, rows: list[dict], label: str, top: int, fields: tuple[str, ...] | None = None,
             by: str | None = None) -> tuple[str, tuple[str, ...], list[tuple]]:
    """Rows that changed, by time change (the rows' own order: GPU time; or the change of ``by``):
    status, the first two figures (or ``fields``) base, new and delta, and the name."""
    shown = list(fields or ([k for k, v in rows[0].items() if isinstance(v, dict)][:2] if rows else []))
    changed = [r for r in rows if r["status"] != "same"]
    if by is not None:
        changed.sort(key=lambda r: (-abs(r[by]["delta"] or 0), -(r[by]["new"] or 0), str(r.get(label))))
    return (f"{title} by time change (top {top} of {len(changed)} changed; "
            f"{sum(r['status'] == 'added' for r in rows)} added, "
            f"{sum(r['status'] == 'removed' for r in rows)} removed)",
            ("Status", *(f"{f} {s}" for f in shown for s in ("base", "new", "delta")), "Name"),
            [(r["status"], *(r[f][s] for f in shown for s in ("base", "new", "delta")),
              r.get(label) or r.get("name") or r.get("type")) for r in changed[:top]])


def _cpu_tables(d: dict, top: int) -> list[tuple[str, tuple[str, ...], list[tuple]]]:
    """The operators and module classes of two runs without GPU work, by their CPU columns."""
    out = [_changes("Operators", d["operators"], "name", top, ("calls", "self_cpu_us"), by="self_cpu_us")]
    if d.get("modules"):
        out.append(_changes("nn.Module classes", d["modules"], "type", top, ("calls", "cpu_us"), by="cpu_us"))
    return out
