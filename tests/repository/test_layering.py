"""The layering rules of docs/architecture.md, checked on the import graph read from every module's AST.

Each module belongs to a *unit*: a subpackage of ``otel_profiler`` (``otel_profiler.live``), one of its
loose modules (``otel_profiler.config``) or ``cuda_tracer``. Units stand on floors (``FLOORS``, ground
first); a module may import its own unit and any unit on a lower floor. An import that goes sideways
or up must be named in ``ALLOWED_UP`` with its reason. Every import counts, at module level or inside a
function (the lazy imports that keep start-up cheap); only one under ``if TYPE_CHECKING`` is left out,
since it never runs. No two units import each other, directly or through others, and no two
modules either (a module's import of its own package aside). ``NEVER`` states the
rules the README names, so they hold whatever the floors say.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("cuda_tracer", "otel_profiler")

FLOORS: list[tuple[str, ...]] = [
    ("cuda_tracer",),  # capture and the event model: never imports otel_profiler
    ("otel_profiler.version", "otel_profiler.names", "otel_profiler.profiler_warnings",
     "otel_profiler.logs", "otel_profiler.shared"),  # shared: OTLP target rules, span defaults
    ("otel_profiler.config",),  # typed settings every stage may import
    ("otel_profiler.analysis",),  # never imports export, live, bootstrap, commands or the CLI
    ("otel_profiler.cluster",),  # multi-rank map/reduce on local processes or a Dask cluster
    ("otel_profiler.spans", "otel_profiler.report", "otel_profiler.metrics"),
    ("otel_profiler.export", "otel_profiler.app"),  # app: the Profiler app (serve): reads the store, renders reports
    ("otel_profiler.live",),
    ("otel_profiler.api",),
    ("otel_profiler", "otel_profiler.integrations", "otel_profiler.compat"),
    ("otel_profiler.bootstrap",),
    ("otel_profiler.commands",),
    ("otel_profiler.cli",),
    ("otel_profiler.__main__",),
]

NEVER: list[tuple[str, str]] = [
    ("cuda_tracer", "otel_profiler"),
    *(("otel_profiler.analysis", up) for up in ("otel_profiler.export", "otel_profiler.live",
                                                "otel_profiler.bootstrap", "otel_profiler.commands",
                                                "otel_profiler.cli")),
    *((low, up) for low in ("otel_profiler.spans", "otel_profiler.metrics", "otel_profiler.export")
      for up in ("otel_profiler.live", "otel_profiler.commands")),
]
"""(importing unit or package, imported unit or package) pairs that must never occur."""

ALLOWED_UP: dict[tuple[str, str], str] = {
    # (importing unit, imported unit): why the import may run sideways or up.
}


def unit_of(module: str) -> str:
    """``otel_profiler.live.session`` -> ``otel_profiler.live``; loose modules are their own unit."""
    parts = module.split(".")
    if parts[0] == "cuda_tracer":
        return "cuda_tracer"
    if len(parts) == 1:
        return "otel_profiler"
    return ".".join(parts[:2])


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _statements(body: list[ast.stmt]):
    """Every statement of ``body`` and of the blocks inside it (imports are statements, so the
    expressions are never walked); the body of an ``if TYPE_CHECKING:`` is left out."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, ast.If) and _type_checking_only(stmt):
            yield from _statements(stmt.orelse)
            continue
        for block in ("body", "orelse", "finalbody"):
            inner = getattr(stmt, block, None)
            if isinstance(inner, list):
                yield from _statements(inner)
        for handler in getattr(stmt, "handlers", ()):
            yield from _statements(handler.body)
        for case in getattr(stmt, "cases", ()):
            yield from _statements(case.body)


def _imports(tree: ast.Module, module: str, is_package: bool):
    """(imported module, line) for every import in ``tree`` that names one of ``PACKAGES``."""
    for child in _statements(tree.body):
        if isinstance(child, ast.Import):
            for alias in child.names:
                yield alias.name, child.lineno
        elif isinstance(child, ast.ImportFrom):
            if child.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (child.level - 1)]
                target = ".".join(base + ([child.module] if child.module else []))
            else:
                target = child.module or ""
            # ``from pkg import mod`` imports the module pkg.mod when there is one
            for alias in child.names:
                yield f"{target}.{alias.name}", child.lineno


def file_edges(root: Path, rel: Path, text: str) -> list[tuple[str, str, str]]:
    """(importing module, imported unit, "file:line") for the imports of one file ``rel`` under ``root``."""
    parts = list(rel.with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    module = ".".join(parts[:-1] if is_package else parts)
    tree = ast.parse(text, str(rel))
    return [(module, _known_unit(root, target), f"{rel}:{line}")
            for target, line in _imports(tree, module, is_package) if target.split(".")[0] in PACKAGES]


def import_graph(root: Path) -> tuple[tuple[str, str, str], ...]:
    """Every import between the units under ``root`` (see ``file_edges``)."""
    return tuple(edge for package in PACKAGES for path in sorted((root / package).rglob("*.py"))
                 for edge in file_edges(root, path.relative_to(root), path.read_text(encoding="utf-8")))


@functools.lru_cache(maxsize=None)
def repo_graph() -> tuple[tuple[str, str, str], ...]:
    return import_graph(REPO)


def graph_with(rel: str, text: str) -> list[tuple[str, str, str]]:
    """The repository's import graph as it would be with file ``rel`` holding ``text``."""
    return [e for e in repo_graph() if not e[2].startswith(rel + ":")] + file_edges(REPO, Path(rel), text)


def _known_unit(root: Path, target: str) -> str:
    """The unit of ``target``; for ``from otel_profiler import __version__``-style names that are
    attributes, not modules, the unit of the package they come from."""
    parts = target.split(".")
    while len(parts) > 1:
        place = root.joinpath(*parts)
        if place.with_suffix(".py").exists() or (place / "__init__.py").exists():
            break
        parts.pop()
    return unit_of(".".join(parts))


def violations(edges) -> list[str]:
    """Every import of ``edges`` (an import graph) that breaks a rule, one line each (empty: the
    layering holds)."""
    floor = {unit: i for i, units in enumerate(FLOORS) for unit in units}
    out = []
    units_seen: dict[str, set[str]] = {}
    for module, imported, where in edges:
        mine = unit_of(module)
        if mine not in floor:
            out.append(f"{where}: {module} is in no floor (add its unit to FLOORS)")
            continue
        if imported not in floor:
            out.append(f"{where}: {module} imports {imported}, which is in no floor")
            continue
        if imported == mine:
            continue
        units_seen.setdefault(mine, set()).add(imported)
        if floor[imported] >= floor[mine] and (mine, imported) not in ALLOWED_UP:
            out.append(f"{where}: {module} ({mine}, floor {floor[mine]}) imports {imported} "
                       f"(floor {floor[imported]}): not a lower floor")
    for module, imported, where in edges:
        for low, up in NEVER:
            if _within(module, low) and _within(imported, up):
                out.append(f"{where}: {module} imports {imported}: {low} never imports {up}")
    out.extend(_cycles(units_seen))
    return out


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _cycles(graph: dict[str, set[str]]) -> list[str]:
    """Each group of units that import each other (a strongly connected component of more than one
    unit), as ``cycle between units: a -> b -> ...`` (Tarjan's algorithm, linear in the edges)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[str] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append("cycle between units: " + " -> ".join(sorted(group)))

    for start in sorted(graph):
        if start not in index:
            visit(start)
    return found


# ------------------------------------------------------------------------------------------ tests
def test_the_layering_holds():
    assert violations(repo_graph()) == []


def test_every_unit_of_the_tree_stands_on_a_floor():
    floors = {unit for units in FLOORS for unit in units}
    units = {unit_of(".".join(p.relative_to(REPO).with_suffix("").parts[:2]).replace(".__init__", ""))
             for package in PACKAGES for p in (REPO / package).glob("*")
             if (p.suffix == ".py" or (p / "__init__.py").exists())}
    assert units <= floors, sorted(units - floors)


def test_allowed_upward_imports_are_used_and_explained():
    used = {(unit_of(m), u) for m, u, _ in repo_graph()}
    for pair, reason in ALLOWED_UP.items():
        assert pair in used, f"{pair} is allowed but no longer imported: remove it from ALLOWED_UP"
        assert len(reason.split()) >= 4, pair


@pytest.mark.parametrize("path, line, expected", [
    ("cuda_tracer/model/events.py", "from otel_profiler.names import demangle",
     "cuda_tracer/model/events.py:{n}: cuda_tracer.model.events (cuda_tracer, floor 0) imports otel_profiler.names"),
    ("otel_profiler/analysis/stats.py", "    from ..export import exporter",
     "otel_profiler.analysis.stats (otel_profiler.analysis, floor 3) imports otel_profiler.export"),
    ("otel_profiler/analysis/stats.py", "    from otel_profiler.commands import summary",
     "imports otel_profiler.commands"),
    ("otel_profiler/spans/build.py", "    from ..live import session",
     "otel_profiler.spans.build (otel_profiler.spans, floor 5) imports otel_profiler.live"),
    ("otel_profiler/metrics/points.py", "    from ..commands import run",
     "imports otel_profiler.commands"),
])
def test_a_bad_import_is_caught(path, line, expected):
    """The checker fails on an import injected into a module (as it would be read from the file)."""
    lines = (REPO / path).read_text(encoding="utf-8").splitlines()
    if line.startswith(" "):  # a lazy import, inside a function appended to the module
        lines += ["", "", "def _injected():", line]
    else:
        lines.insert(next(i for i, x in enumerate(lines) if x.startswith(("import ", "from "))
                          and "__future__" not in x), line)
    n = next(i for i, x in enumerate(lines, 1) if x == line)
    found = violations(graph_with(path, "\n".join(lines) + "\n"))
    assert any(expected.format(n=n) in v for v in found), found
    assert any("never imports" in v for v in found), found  # and a rule the README names


def test_a_cycle_between_units_is_caught():
    # analysis -> spans (up) and spans -> analysis (down) make a cycle, reported besides the upward import
    path = "otel_profiler/analysis/stats.py"
    text = (REPO / path).read_text() + "\n\ndef _injected():\n    from ..spans import build\n"
    found = violations(graph_with(path, text))
    assert any(v.startswith("cycle between units:") and "otel_profiler.analysis" in v
               and "otel_profiler.spans" in v for v in found), found


def test_type_checking_imports_are_not_edges():
    path = "otel_profiler/analysis/stats.py"
    text = (REPO / path).read_text() + ("\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                        "    from ..live import session\n")
    assert violations(graph_with(path, text)) == []
    assert violations(graph_with(path, text.replace("if TYPE_CHECKING:", "if True:")))  # the same import, run


def module_cycles(files: dict[str, str]) -> list[str]:
    """Each group of modules that import each other, directly or through others, in ``files``
    (repository-relative path -> text). A module's import of its own package (``from . import OK``
    in a package's submodule) is left out: the package is always loaded first."""
    modules = {".".join(Path(rel).with_suffix("").parts).removesuffix(".__init__") for rel in files}

    def module_of(target: str) -> str:
        while target not in modules and "." in target:
            target = target.rsplit(".", 1)[0]
        return target

    graph: dict[str, set[str]] = {}
    for rel, text in files.items():
        parts = list(Path(rel).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        module = ".".join(parts[:-1] if is_package else parts)
        for target, _ in _imports(ast.parse(text, rel), module, is_package):
            imported = module_of(target)
            if imported.split(".")[0] in PACKAGES and imported != module \
                    and not module.startswith(imported + "."):
                graph.setdefault(module, set()).add(imported)
    return [line.replace("cycle between units", "cycle between modules") for line in _cycles(graph)]


@functools.lru_cache(maxsize=None)
def repo_files() -> dict[str, str]:
    return {path.relative_to(REPO).as_posix(): path.read_text(encoding="utf-8")
            for package in PACKAGES for path in sorted((REPO / package).rglob("*.py"))}


def test_no_two_modules_import_each_other():
    """Within a unit too: a piece two modules share sits in a lower module (``commands/__init__``'s
    ``choose_run_ids``, ``export/profiles_target``), so no module needs the one that needs it."""
    assert module_cycles(repo_files()) == []


def test_a_cycle_between_modules_is_caught():
    path = "otel_profiler/export/profiles_target.py"
    files = dict(repo_files())
    files[path] += "\n\ndef _injected():\n    from .profiles_config import profiles_config\n"
    found = module_cycles(files)
    assert any("otel_profiler.export.profiles_config" in v and "otel_profiler.export.profiles_target" in v
               for v in found), found


def test_no_module_over_500_lines_and_at_most_8_loose_modules():
    """Modules with one job stay small; new code goes into the stage folders, not the package root."""
    files = [p for package in PACKAGES for p in sorted((REPO / package).rglob("*.py"))]
    long = [f"{p.relative_to(REPO)}: {n} lines" for p in files
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 500]
    assert long == []
    loose = sorted(p.name for p in (REPO / "otel_profiler").glob("*.py"))
    assert len(loose) <= 8, loose
