"""The insight rules and their thresholds as a Markdown page (``docs/insights.md``)::

    python -m otel_profiler.analysis.insights_doc > docs/insights.md
"""

from __future__ import annotations

import inspect

from .insights import RULES, thresholds_doc


def markdown() -> str:
    lines = ["# Insights: rules and thresholds", "",
             "`otel-profiler summary` and `otel-profiler report` run every rule below on a profile; a "
             "rule that fires gives a finding with its evidence (the numbers) and a recommendation. "
             "Rules whose data a trace lacks (steps, CPU-side events, memory samples, several ranks) "
             "stay silent. Override any threshold with `--threshold NAME=VALUE` (repeatable), e.g. "
             "`otel-profiler report trace.json.gz -o report.html --threshold gpu_util_low_pct=60`.", "",
             "This page is generated: `python -m otel_profiler.analysis.insights_doc > docs/insights.md`.",
             "", "## Rules", "", "| Rule | Fires when |", "| --- | --- |"]
    for name, rule in RULES.items():
        doc = " ".join((inspect.getdoc(rule) or "").split("\n\n")[0].split())
        lines.append(f"| `{name}` | {doc.replace('|', '/')} |")
    lines += ["", "## Thresholds", "", "| Name | Default | Meaning |", "| --- | --- | --- |"]
    for t in thresholds_doc():
        lines.append(f"| `{t['name']}` | {t['default']:g} | {t['meaning'].replace('|', '/')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
