"""Every output of a summary document behind one interface: ``RENDERERS[name](document, options)``
returns what to write (text, or bytes for Perfetto). ``table``, ``csv`` and ``json`` render the
summary (``console``), ``html`` the self-contained report (``html``), ``perfetto`` the events as a
Chrome trace (``perfetto``); ``SUMMARY_RENDERERS`` and ``REPORT_RENDERERS`` are the ones the
``summary`` and ``report`` commands offer (their ``--format`` choices). The document (``analysis.document.SummaryDocument``) computes its
summary and insights once, on first use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..analysis.document import SummaryDocument
from . import console


@dataclass(frozen=True)
class RenderOptions:
    """What the text renderers take: rows per table, longest cell (0: never cut), wrap width."""

    top: int = 20
    name_width: int = 90
    width: int | None = None


def table(doc: SummaryDocument, options: RenderOptions) -> str:
    return console.render_table(doc.summary, top=options.top, name_width=max(options.name_width, 0),
                                width=options.width)


def csv(doc: SummaryDocument, options: RenderOptions) -> str:
    return console.render_csv(doc.summary)


def json(doc: SummaryDocument, options: RenderOptions) -> str:
    return console.render_json(doc.summary)


def html(doc: SummaryDocument, options: RenderOptions) -> str:
    from .html import render_html, report_data

    return render_html(report_data(doc))


def perfetto(doc: SummaryDocument, options: RenderOptions) -> bytes:
    from .perfetto import chrome_trace_bytes

    return chrome_trace_bytes(doc.profile)


Renderer = Callable[[SummaryDocument, RenderOptions], "str | bytes"]

SUMMARY_RENDERERS: dict[str, Renderer] = {"table": table, "json": json, "csv": csv}
"""``otel-profiler summary --format``: the summary as text, JSON or CSV (``console``); the command
line's choices are these names, in this order."""

REPORT_RENDERERS: dict[str, Renderer] = {"html": html, "perfetto": perfetto}
"""``otel-profiler report --format``: the self-contained HTML report, or a Chrome trace for Perfetto."""

RENDERERS: dict[str, Renderer] = {**SUMMARY_RENDERERS, **REPORT_RENDERERS}
"""Every renderer of a summary document, by name."""
