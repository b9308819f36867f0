"""The names of the renderers in ``renderers.RENDERERS``, by the command that offers them, importable
without the renderers (no numpy, no analysis): the command line's ``--format`` choices."""

from __future__ import annotations

SUMMARY_FORMATS = ("table", "json", "csv")
"""``otel-profiler summary --format``: the summary as text, JSON or CSV (``report.console``)."""

REPORT_FORMATS = ("html", "perfetto")
"""``otel-profiler report --format``: the self-contained HTML report, or a Chrome trace for Perfetto."""

FORMATS = SUMMARY_FORMATS + REPORT_FORMATS
"""Every renderer's name: the keys of ``renderers.RENDERERS``."""
