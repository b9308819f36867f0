"""Every output of a summary document behind one interface, a :class:`Renderer`: its format name, the
file extension it writes, whether its output is bytes, and the function that makes it.

``table``, ``csv`` and ``json`` render the summary (``console``; they read only ``doc.summary``, so a
cluster's merged summary renders the same way), ``html`` the self-contained report (``html``),
``perfetto`` the events as a Chrome trace (``perfetto``); ``SUMMARY_RENDERERS`` and
``REPORT_RENDERERS`` are the ones the ``summary`` and ``report`` commands offer (their ``--format``
choices). ``CLUSTER_REPORT`` is the multi-rank page of a job read through the cluster
(``cluster_html``). The document (``analysis.document.SummaryDocument``) computes its summary and
insights once, on first use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Generic, Protocol, TypeVar

from ..analysis.document import SummaryDocument
from ..analysis.summary_schema import Summary
from . import console

if TYPE_CHECKING:
    from ..cluster.document import ClusterDocument

Document = TypeVar("Document", contravariant=True)


@dataclass(frozen=True)
class RenderOptions:
    """What the text renderers take: rows per table, longest cell (0: never cut), wrap width."""

    top: int = 20
    name_width: int = 90
    width: int | None = None


@dataclass(frozen=True)
class Renderer(Generic[Document]):
    """One output of a document: ``format`` (the ``--format`` name), ``extension`` (of the file it
    writes), ``binary`` (bytes, not text) and ``render``. ``text`` and ``data`` say which the
    caller expects: text for a terminal, bytes for a file."""

    format: str
    extension: str
    binary: bool
    render: Callable[[Document, RenderOptions], str | bytes]

    def text(self, doc: Document, options: RenderOptions) -> str:
        """The output as text (a binary renderer has none: ``TypeError``)."""
        out = self.render(doc, options)
        if isinstance(out, bytes):
            raise TypeError(f"the {self.format} renderer writes bytes, not text")
        return out

    def data(self, doc: Document, options: RenderOptions) -> bytes:
        """The output as the bytes of its file (text in UTF-8; a name that is no UTF-8, held as
        surrogates, is written as ``\\udcXX`` text)."""
        out = self.render(doc, options)
        return out if isinstance(out, bytes) else out.encode("utf-8", "backslashreplace")


class HasSummary(Protocol):
    """What the summary renderers read: a summary document (one profile's, or a cluster's merge)."""

    @property
    def summary(self) -> Summary: ...


def _table(doc: HasSummary, options: RenderOptions) -> str:
    return console.render_table(doc.summary, top=options.top, name_width=max(options.name_width, 0),
                                width=options.width)


def _csv(doc: HasSummary, options: RenderOptions) -> str:
    return console.render_csv(doc.summary)


def _json(doc: HasSummary, options: RenderOptions) -> str:
    return console.render_json(doc.summary)


def _html(doc: SummaryDocument, options: RenderOptions) -> str:
    from .html import render_html, report_data

    return render_html(report_data(doc))


def _perfetto(doc: SummaryDocument, options: RenderOptions) -> bytes:
    from .perfetto import chrome_trace_bytes

    return chrome_trace_bytes(doc.profile)


def _cluster_html(doc: ClusterDocument, options: RenderOptions) -> str:
    from .cluster_html import render_cluster_html

    return render_cluster_html(doc.summary, doc.lanes)


TABLE: Renderer[HasSummary] = Renderer("table", ".txt", False, _table)
CSV: Renderer[HasSummary] = Renderer("csv", ".csv", False, _csv)
JSON: Renderer[HasSummary] = Renderer("json", ".json", False, _json)
HTML: Renderer[SummaryDocument] = Renderer("html", ".html", False, _html)
PERFETTO: Renderer[SummaryDocument] = Renderer("perfetto", ".json", True, _perfetto)
CLUSTER_REPORT: Renderer[ClusterDocument] = Renderer("html", ".html", False, _cluster_html)
"""``otel-profiler report`` with a scheduler: the multi-rank page."""

SUMMARY_RENDERERS: dict[str, Renderer[HasSummary]] = {r.format: r for r in (TABLE, JSON, CSV)}
"""``otel-profiler summary --format``: the summary as text, JSON or CSV (``console``); the command
line's choices are these names, in this order."""

REPORT_RENDERERS: dict[str, Renderer[SummaryDocument]] = {r.format: r for r in (HTML, PERFETTO)}
"""``otel-profiler report --format``: the self-contained HTML report, or a Chrome trace for Perfetto."""

RENDERERS: dict[str, Renderer[SummaryDocument]] = {**SUMMARY_RENDERERS, **REPORT_RENDERERS}
"""Every renderer of a summary document, by name."""
