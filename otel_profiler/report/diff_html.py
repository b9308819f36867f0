"""The comparison page of ``otel-profiler diff --format html``: one self-contained file, the diff's
tables drawn server-side (every name escaped), increases and decreases coloured, the full diff JSON
kept in a data block for tools."""

from __future__ import annotations

import html
import json

from ..analysis.diff import NO_GPU_NOTE, has_gpu, tables

_CSS = """body{font:14px/1.4 system-ui,sans-serif;color:#1d2330;background:#f6f7fa;margin:0}
header{background:#1d2330;color:#fff;padding:10px 20px}h1{margin:0;font-size:18px}
header div{color:#b8c0d0;font-size:12px;overflow-wrap:anywhere}main{padding:16px 20px}
section{background:#fff;border:1px solid #d9dee7;border-radius:8px;padding:12px 14px;margin-bottom:14px}
h2{font-size:14px;margin:0 0 8px}table{border-collapse:collapse;width:100%;font-size:12px}
th,td{border-bottom:1px solid #d9dee7;padding:3px 6px;text-align:left}th{background:#f0f2f6}
td.num{text-align:right;font-variant-numeric:tabular-nums}td.up{color:#b42318}td.down{color:#067647}
td.name{max-width:640px;overflow-wrap:anywhere}"""


def _cell(value, header: str) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        text = f"{value:,.3f}" if isinstance(value, float) else f"{value:,}"
        tone = " up" if "delta" in header.lower() and value > 0 else \
            " down" if "delta" in header.lower() and value < 0 else ""
        return f'<td class="num{tone}" data-value="{value!r}">{text}</td>'
    text = html.escape(str(value))
    return f'<td class="name" title="{text}">{text}</td>'


def render_diff_html(d: dict, top: int = 20) -> str:
    """The page for diff ``d`` (see ``analysis.diff``)."""
    parts = [] if has_gpu(d) else [f"<p class=\"note\">{html.escape(NO_GPU_NOTE)}</p>"]
    for title, header, rows in tables(d, top):
        if not rows:
            continue
        head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
        body = "".join("<tr>" + "".join(_cell(v, h) for v, h in zip(r, header)) + "</tr>" for r in rows)
        parts.append(f"<section><h2>{html.escape(title)}</h2><table><thead><tr>{head}</tr></thead>"
                     f"<tbody>{body}</tbody></table></section>")
    data = json.dumps(d, ensure_ascii=False, allow_nan=False).replace("<", "\\u003c")
    base, new = (html.escape(", ".join(d[k]["sources"])) for k in ("base", "new"))
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
            "style-src 'unsafe-inline'\"><title>otel-profiler diff</title>"
            f"<style>{_CSS}</style></head><body><header><h1>otel-profiler diff</h1>"
            f"<div>base: {base}</div><div>new: {new}</div></header><main>{''.join(parts)}</main>"
            f"<script type=\"application/json\" id=\"diff-data\">{data}</script></body></html>")
