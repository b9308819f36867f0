"""Renders a summary (see ``analysis.summary``) as plain-text tables or CSV, with nsys-style columns."""

from __future__ import annotations

import csv
import io
import json
from typing import Any, Iterable, Sequence

Table = tuple[str, Sequence[str], list[Sequence[Any]]]

_STATS = ("Total (us)", "Avg (us)", "Med (us)", "Min (us)", "Max (us)", "StdDev (us)")


def _stat_cells(s: dict) -> list[float]:
    return [s["total_us"], s["avg_us"], s["med_us"], s["min_us"], s["max_us"], s["std_us"]]


def tables(summary: dict, top: int = 20) -> list[Table]:
    """The summary's sections as (title, header, rows) tables, in reading order."""
    out: list[Table] = []
    out.append(("GPU temporal breakdown (per device)",
                ("Device", "Span (us)", "Busy (us)", "Idle %", "Compute %", "Non-compute %", "Ops"),
                [(d, v["span_us"], v["busy_us"], v["idle_pct"], v["compute_pct"],
                  v["non_compute_pct"], v["ops"]) for d, v in summary["devices"].items()]))
    k = summary["kernels"]
    out.append((f"GPU kernels by name ({min(top, len(k['by_name']))} of {len(k['by_name'])} names; {k['count']} launches)",
                ("Time %", *_STATS[:1], "Instances", *_STATS[1:], "Class", "Name"),
                [(r["time_pct"], r["total_us"], r["instances"], *_stat_cells(r)[1:], r["class"],
                  r["name"]) for r in k["by_name"][:top]]))
    out.append(("GPU time by kernel class (us, summed)",
                ("Compute", "Communication", "Memory"),
                [tuple(k["by_class"].get(c, 0.0) for c in ("compute", "communication", "memory"))]))
    out.append(("Memory copies and sets",
                ("Operation", "Count", "Bytes", "Throughput (GB/s)", *_STATS),
                [(name, v["count"], v["bytes"], v["throughput_gbps"], *_stat_cells(v))
                 for name, v in [*summary["memcpy"].items(), ("Memset", summary["memset"])]
                 if v["count"]]))
    out.append((f"CUDA API calls (top {top})",
                ("Time %", "Total (us)", "Num Calls", *_STATS[1:], "Name"),
                [(r["time_pct"], r["total_us"], r["calls"], *_stat_cells(r)[1:], r["name"])
                 for r in summary["runtime_api"][:top]]))
    sync = summary["sync"]
    out.append(("Synchronization",
                ("Kind", "Count", *_STATS),
                [(kind, v["count"], *_stat_cells(v)) for kind, v in sync["by_kind"].items()] +
                [(f"API {r['name']}", r["calls"], *_stat_cells(r)) for r in sync["api"]]))
    launch = summary["launch"]
    out.append((f"Launch delay and latency ({launch['matched_gpu_ops']} linked GPU ops, "
                f"{launch['orphan_gpu_ops']} without a launch call in the trace)",
                ("Metric", "p50 (us)", "p90 (us)", "p99 (us)", "Max (us)", "Mean (us)"),
                [(label, v["p50"], v["p90"], v["p99"], v["max"], v["mean"])
                 for label, v in (("launch delay (HTA)", launch["delay_us"]),
                                  ("launch latency (NVIDIA)", launch["latency_us"]))]))
    out.append(("Stream idle breakdown",
                ("Device", "Stream", "Ops", "Host wait (us)", "Kernel wait (us)", "Other (us)",
                 "Max queue"),
                [((f"{s['rank']}:{s['device']}" if "ranks" in summary else s["device"]),
                  s["stream"], s["ops"], s["host_wait_us"], s["kernel_wait_us"], s["other_us"],
                  s["max_queue_depth"]) for s in summary["streams"]]))
    for title, key in (("User annotations", "annotations"), ("GPU user annotations", "gpu_annotations")):
        out.append((f"{title} (top {top})",
                    ("Instances", *_STATS, "Name"),
                    [(r["instances"], *_stat_cells(r), r["name"]) for r in summary[key][:top]]))
    steps = summary["steps"]
    d = steps["duration_us"]
    out.append((f"Steps ({steps['count']})",
                ("Count", "p50 (us)", "p90 (us)", "p99 (us)", "Max (us)", "Mean (us)"),
                [(steps["count"], d["p50"], d["p90"], d["p99"], d["max"], d["mean"])]
                if steps["count"] else []))
    if "insights" in summary:
        out.append((f"Insights ({len(summary['insights'])})",
                    ("Severity", "Scope", "Rule", "Evidence", "Recommendation"),
                    [(i["severity"], i["scope"], i["rule"], i["evidence"], i["recommendation"])
                     for i in summary["insights"]]))
    return out


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 1e6 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def render_table(summary: dict, top: int = 20, name_width: int = 70) -> str:
    lines: list[str] = []
    if summary.get("notes"):
        lines.extend(f"note: {n}" for n in summary["notes"])
        lines.append("")
    for title, header, rows in tables(summary, top):
        lines.append(f"== {title}")
        if not rows:
            lines.append("   (none)")
            lines.append("")
            continue
        cells = [[_fmt(c) for c in row] for row in rows]
        cells = [[c if len(c) <= name_width else c[:name_width - 1] + "…" for c in row] for row in cells]
        widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(header)]
        last = len(header) - 1

        def line(row: Iterable[str]) -> str:
            parts = [c.ljust(widths[i]) if i == last or not _numeric(c) else c.rjust(widths[i])
                     for i, c in enumerate(row)]
            return "  ".join(parts).rstrip()

        lines.append(line(header))
        lines.append("  ".join("-" * w for w in widths))
        lines.extend(line(r) for r in cells)
        lines.append("")
    return "\n".join(lines)


def _numeric(cell: str) -> bool:
    return cell.replace(",", "").replace(".", "").replace("-", "").isdigit()


def render_csv(summary: dict) -> str:
    """Every table, each preceded by a ``# title`` line and separated by a blank line."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for title, header, rows in tables(summary, top=10**9):
        buf.write(f"# {title}\n")
        writer.writerow(header)
        writer.writerows(rows)
        buf.write("\n")
    return buf.getvalue()


def render_json(summary: dict) -> str:
    return json.dumps(summary, indent=1, ensure_ascii=False)
