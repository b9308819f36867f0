"""The tables of ``docs/insights.md``: every insight rule (from its docstring) and every threshold (from
its field's metadata), in Markdown. ``python scripts/gen_docs.py`` writes them into the page
(``python -m otel_profiler.analysis.insights.doc`` prints them)."""

from __future__ import annotations

import inspect

from . import RULES, Thresholds
from .thresholds import markdown_table


def markdown() -> str:
    """The rules table and the thresholds table."""
    lines = ["## Rules", "", "| Rule | Fires when |", "| --- | --- |"]
    for name, rule in RULES.items():
        doc = " ".join((inspect.getdoc(rule) or "").split("\n\n")[0].split()).replace("``", "`")
        lines.append(f"| `{name}` | {doc.replace('|', '/')} |")
    lines += ["", "## Thresholds", "", markdown_table(Thresholds)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
