"""A self-contained HTML page for a multi-rank job read through the cluster: the job's figures, its
insights, the clock offsets, a rank x step heatmap of own work, the aligned per-rank timeline
(steps and collectives on the reference rank's clock; bounded: ``StragglerThresholds.heatmap_ranks``
ranks, stragglers first, ``cluster.analyse.TIMELINE_BARS`` collectives each) and the collective-wait table. Inline
SVG and CSS only: it opens offline."""

from __future__ import annotations

from html import escape
from typing import Any

from ..cluster.analyse import ClusterSummary
from ..cluster.stragglers import Heatmap

_CSS = ("body{font:14px system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;"
        "margin:1em 0}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}"
        "th{background:#f3f3f3}td.l{text-align:left}.high{color:#b00}.medium{color:#b60}")


def _table(head: list[str], rows: list[list[Any]]) -> str:
    cells = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td{' class=l' if isinstance(c, str) else ''}>"
                                    f"{escape(c) if isinstance(c, str) else _num(c)}</td>" for c in r) + "</tr>"
                   for r in rows)
    return f"<table><tr>{cells}</tr>{body}</table>"


def _num(x: Any) -> str:
    if x is None:
        return "n/a"
    return f"{x:,.2f}" if isinstance(x, float) else f"{x:,}"


def _heatmap(h: Heatmap) -> str:
    if not h["ranks"] or not h["steps"]:
        return "<p>No steps were recorded.</p>"
    values = [v for row in h["own_us"] for v in row if v is not None]
    lo, hi = min(values), max(values)
    cw, ch, left, top = 36, 14, 60, 20
    parts = [f'<svg width="{left + cw * len(h["steps"]) + 10}" height="{top + ch * len(h["ranks"]) + 10}">']
    for j, s in enumerate(h["steps"]):
        parts.append(f'<text x="{left + j * cw + 2}" y="14" font-size="10">{s}</text>')
    for i, (rank, row) in enumerate(zip(h["ranks"], h["own_us"])):
        y = top + i * ch
        parts.append(f'<text x="0" y="{y + 11}" font-size="10">rank {rank}</text>')
        for j, v in enumerate(row):
            shade = 0 if v is None or hi == lo else (v - lo) / (hi - lo)
            color = "#eee" if v is None else f"rgb(255,{int(230 - 180 * shade)},{int(200 - 180 * shade)})"
            label = "no step" if v is None else f"{v / 1e3:,.2f} ms"
            parts.append(f'<rect x="{left + j * cw}" y="{y}" width="{cw - 1}" height="{ch - 1}" fill="{color}">'
                         f'<title>rank {rank}, step {h["steps"][j]}: own work {label}</title></rect>')
    return "".join(parts) + "</svg>"


def _timeline(lanes: list[dict[str, Any]]) -> str:
    """Lanes: ``{rank, steps: [(start_ns, end_ns, step)], collectives: [(start_ns, end_ns)]}`` on
    the aligned clock."""
    spans = [t for lane in lanes for t in lane["steps"]] + [t for lane in lanes for t in lane["collectives"]]
    if not spans:
        return "<p>Nothing to draw.</p>"
    t0, t1 = min(s[0] for s in spans), max(s[1] for s in spans)
    width, lh, left = 900, 16, 60
    scale = width / max(t1 - t0, 1)
    parts = [f'<svg width="{left + width + 10}" height="{lh * len(lanes) + 10}">']
    for i, lane in enumerate(lanes):
        y = i * lh
        parts.append(f'<text x="0" y="{y + 12}" font-size="10">rank {lane["rank"]}</text>')
        for s, e, step in lane["steps"]:
            parts.append(f'<rect x="{left + (s - t0) * scale:.1f}" y="{y}" width="{max((e - s) * scale, 1):.1f}" '
                         f'height="{lh - 2}" fill="#cde" stroke="#89a"><title>step {step}</title></rect>')
        for s, e in lane["collectives"]:
            parts.append(f'<rect x="{left + (s - t0) * scale:.1f}" y="{y + 3}" width="{max((e - s) * scale, 1):.1f}" '
                         f'height="{lh - 8}" fill="#d84"><title>collective {(e - s) / 1e3:,.1f} µs</title></rect>')
    return "".join(parts) + "</svg>"


def render_cluster_html(summary: ClusterSummary, lanes: list[dict[str, Any]]) -> str:
    """The page for a merged summary (``analyse``) and its timeline lanes (``timeline_lanes``)."""
    k, align, found = summary["kernels"], summary["clock_alignment"], summary["stragglers"]
    out = [f"<!doctype html><html><head><meta charset=utf-8><title>otel-profiler: {len(summary['ranks_meta'])} "
           f"ranks</title><style>{_CSS}</style></head><body>",
           f"<h1>{len(summary['ranks_meta'])} ranks</h1>",
           _table(["kernels", "kernel time (ms)", "steps", "step p50 (ms)", "step p90 (ms)"],
                  [[k["count"], k["total_us"] / 1e3, summary["steps"]["count"],
                    summary["steps"]["duration_us"]["p50"] / 1e3, summary["steps"]["duration_us"]["p90"] / 1e3]]),
           "<h2>Insights</h2>"]
    for i in summary["insights"]:
        out.append(f'<p><b class="{escape(i["severity"])}">[{escape(i["severity"])}] {escape(i["title"])}</b>'
                   f' ({escape(i["scope"])})<br>{escape(i["evidence"])}<br><i>{escape(i["recommendation"])}</i></p>')
    out += ["<h2>Clock alignment</h2>", f"<p>{escape(align['note'])}</p>",
            _table(["rank", "offset (µs)", "uncertainty (µs)", "collectives"],
                   [[int(r), v["offset_us"], v["uncertainty_us"], v["matched"]] for r, v in align["ranks"].items()]),
            "<h2>Stragglers</h2>",
            _table(["step", "rank", "own work (ms)", "vs median (%)", "cause", "evidence"],
                   [[s["step"], x["rank"], x["own_us"] / 1e3, x["excess_pct"], x["cause"], x["evidence"]]
                    for s in found["steps"] for x in s["slowest"][:1]]),
            "<h3>Own work per rank and step (µs; darker: more)</h3>", _heatmap(found["heatmap"]),
            "<h3>Aligned timeline (steps blue, collectives orange)</h3>", _timeline(lanes),
            "<h2>Collective wait per rank</h2>",
            _table(["rank", "collectives", "communication (ms)", "wait (ms)", "wait %", "arrived last"],
                   [[r["rank"], r["collectives"], r["communication_us"] / 1e3, r["wait_us"] / 1e3,
                     r["wait_pct"], r["arrived_last"]] for r in found["collective_wait"]]),
            "</body></html>"]
    return "\n".join(out)
