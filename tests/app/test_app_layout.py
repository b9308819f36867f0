"""The Profiler app's rooms (``otel_profiler/app``), checked on the import graph of its modules read from
their ASTs: no module imports, directly or through others, a module that imports it back; each room
imports only itself and the rooms below it (``auth``, then ``storage``, then ``web``); no folder holds
more than 12 modules and none is over 500 lines. Every import counts, at module level or inside a
function. A probe graph with a circle shows the check can fail."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from test_layering import REPO, _cycles, _imports

APP = REPO / "otel_profiler" / "app"
ROOMS = ("auth", "storage", "web")
"""The app's rooms, ground floor first."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def resolve(target: str) -> str:
    """The module an import names (``pkg.mod.name`` -> ``pkg.mod`` when ``name`` is an attribute)."""
    parts = target.split(".")
    while len(parts) > 1:
        place = REPO.joinpath(*parts)
        if place.with_suffix(".py").exists() or (place / "__init__.py").exists():
            break
        parts.pop()
    return ".".join(parts)


def app_graph() -> dict[str, set[str]]:
    """{app module: the app modules it imports} (packages' ``__init__`` left out: they hold docstrings)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(APP.rglob("*.py")):
        module = module_name(path)
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        targets = {resolve(t) for t, _ in _imports(tree, module, path.name == "__init__.py")}
        graph[module] = {t for t in targets if t.startswith("otel_profiler.app.") and t != module
                         and not (REPO.joinpath(*t.split(".")) / "__init__.py").exists()}
    return graph


def room_of(module: str) -> str:
    return module.split(".")[2] if module.count(".") >= 3 else ""


def test_no_module_of_the_app_imports_one_that_imports_it_back():
    assert _cycles(app_graph()) == []


def test_the_circle_check_finds_a_circle():
    graph = app_graph()
    graph["otel_profiler.app.storage.locations"].add("otel_profiler.app.storage.store")
    assert _cycles(graph)


def test_each_room_imports_only_itself_and_the_rooms_below():
    up = [f"{module} imports {imported}" for module, imports in app_graph().items() for imported in imports
          if room_of(module) in ROOMS and ROOMS.index(room_of(imported)) > ROOMS.index(room_of(module))]
    assert up == []


def test_every_module_is_in_a_room():
    loose = [p.name for p in APP.glob("*.py") if p.name != "__init__.py"]
    rooms = sorted(p.name for p in APP.iterdir() if (p / "__init__.py").exists())
    assert loose == [] and rooms == sorted(ROOMS)


@pytest.mark.parametrize("folder", sorted({p.parent for p in APP.rglob("*.py")}),
                         ids=lambda folder: str(folder.relative_to(REPO)))
def test_no_folder_is_crowded_and_no_module_is_long(folder):
    modules = list(folder.glob("*.py"))
    assert len(modules) <= 12
    assert [p.name for p in modules if len(p.read_text(encoding="utf-8").splitlines()) > 500] == []
