"""Thresholds as dataclass fields that document themselves: ``threshold(default, unit, help)`` puts the
unit and the help text in the field's metadata, and the readers here turn any such dataclass into
``name=value`` parsing, the rows of ``--help`` and the report, and a Markdown table (docs/).

In help texts a name written as ````name```` is code: plain text by default, Markdown on the docs page.
"""

from __future__ import annotations

import re
from dataclasses import MISSING, Field, field, fields
from typing import Any, TypeVar

T = TypeVar("T")

HELP = "help"
UNIT = "unit"
_CODE = re.compile(r"``(.+?)``")


def threshold(default: T, unit: str, help: str) -> T:
    """A dataclass field with ``default`` whose metadata holds its ``unit`` and ``help`` text."""
    return field(default=default, metadata={HELP: help, UNIT: unit})


def _documented(cls: type) -> tuple[Field[Any], ...]:
    found = fields(cls)
    for f in found:
        if HELP not in f.metadata or UNIT not in f.metadata or f.default is MISSING:
            raise TypeError(f"{cls.__name__}.{f.name} is not declared with threshold(default, unit, help)")
    return found


def parse_thresholds(cls: type[T], items: list[str]) -> tuple[T, list[str]]:
    """``cls`` from the ``name=value`` items that name its fields (``gpu_util_low_pct=60``), and the
    other items; raises ``ValueError`` for a value that is not a number."""
    kinds = {f.name: f.type for f in _documented(cls)}
    values: dict[str, Any] = {}
    rest = []
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if sep and name in kinds:
            values[name] = int(value) if kinds[name] in ("int", int) else float(value)
        else:
            rest.append(item)
    return cls(**values), rest


def thresholds_doc(cls: type, code: str = "") -> list[dict[str, Any]]:
    """Every threshold of ``cls`` with its default and meaning (for ``--help`` and the report); names
    the help marks as ````code```` are written between ``code`` ("`" for Markdown)."""
    return [{"name": f.name, "default": f.default, "meaning": _CODE.sub(lambda m: code + m.group(1) + code,
                                                                        f.metadata[HELP])}
            for f in _documented(cls)]


def markdown_table(cls: type) -> str:
    """The thresholds of ``cls`` as a Markdown table: name, default, unit, meaning."""
    lines = ["| Name | Default | Unit | Meaning |", "| --- | --- | --- | --- |"]
    units = {f.name: f.metadata[UNIT] for f in _documented(cls)}
    for t in thresholds_doc(cls, code="`"):
        lines.append(f"| `{t['name']}` | {t['default']:g} | {units[t['name']]} | "
                     f"{t['meaning'].replace('|', '/')} |")
    return "\n".join(lines)
