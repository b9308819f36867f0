"""The cluster sections of a summary as text for a person: clock offsets, stragglers per step and the
collective-wait table (the rest of the summary is rendered as for any profile)."""

from __future__ import annotations

from ..cluster.align import RankOffset
from ..cluster.analyse import ClusterSummary


def _uncertainty(row: RankOffset) -> str:
    return "n/a" if row["uncertainty_us"] is None else f"±{row['uncertainty_us']:,.1f}"


def cluster_text(summary: ClusterSummary, top: int = 20) -> str:
    """``clock alignment``, ``stragglers`` and ``collective wait`` sections (``top`` rows each)."""
    lines: list[str] = []
    align = summary.get("clock_alignment")
    if align:
        lines += ["Clock alignment", "---------------", align["note"]]
        rows = sorted(align["ranks"].items(), key=lambda kv: -abs(kv[1]["offset_us"]))[:top]
        if align["aligned"] and rows:
            lines.append(f"{'rank':>6} {'offset us':>12} {'uncertainty us':>15} {'collectives':>12}")
            lines += [f"{r:>6} {v['offset_us']:>12,.1f} {_uncertainty(v):>15} {v['matched']:>12,}"
                      for r, v in rows]
            if len(align["ranks"]) > top:
                lines.append(f"(largest {top} offsets of {len(align['ranks'])} ranks; all in --format json)")
        lines.append("")
    found = summary.get("stragglers")
    if found and found["steps"]:
        lines += ["Stragglers (own work: step time less communication)", "-" * 51]
        lines.append(f"{'step':>8} {'rank':>6} {'own ms':>10} {'vs median':>10}  cause")
        for step in found["steps"][:top]:
            for x in step["slowest"][:1]:
                flag = "" if x["straggler"] else " (within threshold)"
                lines.append(f"{step['step']:>8} {x['rank']:>6} {x['own_us'] / 1e3:>10,.2f} "
                             f"{x['excess_pct']:>+9.1f}%  {x['cause']}{flag}")
        lines.append("")
        lines += ["Collective wait per rank (longest first)", "-" * 40,
                  f"{'rank':>6} {'collectives':>12} {'comm ms':>10} {'wait ms':>10} {'wait %':>7} {'last in':>8}"]
        for row in sorted(found["collective_wait"], key=lambda r: -r["wait_us"])[:top]:
            lines.append(f"{row['rank']:>6} {row['collectives']:>12,} {row['communication_us'] / 1e3:>10,.2f} "
                         f"{row['wait_us'] / 1e3:>10,.2f} {row['wait_pct']:>7.1f} {row['arrived_last']:>8,}")
    return "\n".join(lines).rstrip()
