"""Every output of the comparison of two runs (``analysis.diff``) behind one interface:
``DIFF_RENDERERS[name]`` is a ``renderers.Renderer`` of the diff document. ``table`` is the changed rows for
a person, ``json`` every figure (the documented diff schema), ``html`` the self-contained comparison
page (``diff_html``). ``otel-profiler diff --format`` offers these names, in this order."""

from __future__ import annotations

from typing import Any, Sequence

from ..analysis.diff import NO_GPU_NOTE, has_gpu, tables
from ..names import terminal_safe
from .console import render_json, table_text, unicode_escaped
from .renderers import Renderer, RenderOptions


def table(d: dict[str, Any], options: RenderOptions) -> str:
    """The runs compared, then each table with changed rows (names cut at ``options.name_width``)."""
    width = max(options.name_width, 0)
    lines = [terminal_safe(f"base: {', '.join(d['base']['sources'])}"),
             terminal_safe(f"new:  {', '.join(d['new']['sources'])}"), ""]
    if not has_gpu(d):
        lines += [f"note: {NO_GPU_NOTE}", ""]
    for title, header, rows in tables(d, options.top):
        if rows:
            shown: list[Sequence[Any]] = list(rows)
            lines.append(table_text(title, header, shown, width))
    return "\n".join(lines)


def json(d: dict[str, Any], options: RenderOptions) -> str:
    return render_json(d)


def html(d: dict[str, Any], options: RenderOptions) -> str:
    """The comparison page, its control characters escaped (it may go to a terminal)."""
    from .diff_html import render_diff_html

    return unicode_escaped(render_diff_html(d, top=options.top))


DiffRenderer = Renderer[dict[str, Any]]
DIFF_RENDERERS: dict[str, DiffRenderer] = {r.format: r for r in (
    Renderer("table", ".txt", False, table), Renderer("json", ".json", False, json),
    Renderer("html", ".html", False, html))}
"""``otel-profiler diff --format``: the comparison as text, JSON or an HTML page."""
