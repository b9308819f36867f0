"""The command line's ``--format`` choices, by the command that offers them: the names of the
renderer registries (``renderers.SUMMARY_RENDERERS``, ``renderers.REPORT_RENDERERS``,
``diff_renderers.DIFF_RENDERERS``), in their order, so a renderer added there is offered here."""

from __future__ import annotations

from .diff_renderers import DIFF_RENDERERS
from .renderers import REPORT_RENDERERS, SUMMARY_RENDERERS

SUMMARY_FORMATS = tuple(SUMMARY_RENDERERS)
"""``otel-profiler summary --format``: the summary as text, JSON or CSV (``report.console``)."""

REPORT_FORMATS = tuple(REPORT_RENDERERS)
"""``otel-profiler report --format``: the self-contained HTML report, or a Chrome trace for Perfetto."""

DIFF_FORMATS = tuple(DIFF_RENDERERS)
"""``otel-profiler diff --format``: the comparison as text, JSON or a self-contained HTML page."""

FORMATS = SUMMARY_FORMATS + REPORT_FORMATS
"""Every summary renderer's name: the keys of ``renderers.RENDERERS``."""
