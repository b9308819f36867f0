"""analysis/ in rooms (docs/architecture.md): no folder of it holds more than 12 modules, no module
more than 500 lines, and every room says in its docstring what it holds."""

from __future__ import annotations

import ast

from conftest import REPO

ANALYSIS = REPO / "otel_profiler" / "analysis"
MAX_MODULES = 12
MAX_LINES = 500


def test_no_room_over_twelve_modules_none_over_500_lines():
    folders = [ANALYSIS, *sorted(p.parent for p in ANALYSIS.rglob("__init__.py") if p.parent != ANALYSIS)]
    assert len(folders) > 1, "analysis/ has no rooms"
    for folder in folders:
        modules = sorted(folder.glob("*.py"))
        assert len(modules) <= MAX_MODULES, f"{folder.relative_to(REPO)}: {len(modules)} modules"
        assert ast.get_docstring(ast.parse((folder / "__init__.py").read_text())), folder
        for module in modules:
            lines = len(module.read_text().splitlines())
            assert lines <= MAX_LINES, f"{module.relative_to(REPO)}: {lines} lines"
