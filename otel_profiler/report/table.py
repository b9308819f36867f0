"""One table of the text and CSV summaries: its title, header, rows, and what the "not in this
profile" line says when it has no rows."""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence


class Table(NamedTuple):
    title: str
    header: Sequence[str]
    rows: Sequence[Sequence[Any]]
    lacks: str = ""  # what the "not in this profile" line says when the table is empty
