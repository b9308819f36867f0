"""Generate the Grafana dashboards' JSON from the Python source (grafana-foundation-sdk).

``python -m dashboards.generate`` writes ``otel_profiler/stack/grafana/<uid>.json`` (trace links for Jaeger,
the trace store the compose file starts); ``--trace-store tempo --out DIR`` writes the Tempo flavour
elsewhere; ``--check`` exits 1 when a committed file differs from the generated text. Output is
deterministic: sorted keys, fixed indentation, one trailing newline.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import ModuleType

from grafana_foundation_sdk.builders import dashboard
from grafana_foundation_sdk.cog.encoder import JSONEncoder

from . import compare, coverage, distributed, health, overview
from .links import dashboard_links
from .panels import Panel, build
from .variables import all_variables

DASHBOARDS: tuple[ModuleType, ...] = (overview, distributed, health, compare)
OUT = Path(__file__).resolve().parent.parent / "otel_profiler" / "stack" / "grafana"
TAGS = ["otel-profiler"]


def panels(module: ModuleType) -> list[Panel]:
    """Every panel of one dashboard module, in order."""
    return [p for _, row in module.rows() for p in row]


def gpu_only_panels() -> frozenset[str]:
    """Titles of the panels with no data on a CPU-only run (every query reads a GPU metric)."""
    return frozenset(p.title for mod in DASHBOARDS for p in panels(mod)
                     if all(coverage.expectation(q.metrics) == "gpu" for q in p.queries))


def build_dashboard(module: ModuleType, store: str = "jaeger") -> dashboard.Dashboard:
    """The SDK builder of one dashboard module."""
    board = (dashboard.Dashboard(module.TITLE).uid(module.UID).description(module.DESCRIPTION).tags(TAGS)
             .refresh("30s").time("now-1h", "now").timezone("browser").tooltip(1).links(dashboard_links(store)))
    for variable in all_variables(store) + (module.variables() if hasattr(module, "variables") else []):
        board = board.with_variable(variable)
    for title, row in module.rows():
        board = board.with_row(dashboard.Row(title))
        for p in row:
            board = board.with_panel(build(p, store))
    return board


def render(module: ModuleType, store: str = "jaeger") -> str:
    """The dashboard's JSON text, as committed."""
    return JSONEncoder(sort_keys=True, indent=2).encode(build_dashboard(module, store).build()) + "\n"


def outputs(store: str = "jaeger", out: Path = OUT) -> dict[Path, str]:
    """File path → JSON text of every dashboard."""
    return {out / f"{module.UID}.json": render(module, store) for module in DASHBOARDS}


def main(argv: list[str] | None = None) -> int:
    """Write (or with ``--check`` compare) the dashboards; 1 when a file is stale."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace-store", choices=("jaeger", "tempo"), default="jaeger")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--check", action="store_true", help="compare with the files instead of writing")
    args = parser.parse_args(argv)
    stale = []
    for path, text in outputs(args.trace_store, args.out).items():
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(path)
    if stale:
        print("out of date (run python -m dashboards.generate):", *stale, sep="\n  ", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
