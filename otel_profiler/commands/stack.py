"""``otel-profiler stack --output DIR``: write out the observability stack that ships with the package.

The files are the package's ``otel_profiler/stack/`` folder, byte for byte: a Docker Compose file for
an OpenTelemetry Collector, Jaeger, Prometheus and Grafana, their configurations, Grafana's
provisioning and the three otel-profiler dashboards. Start it with
``docker compose -f DIR/docker-compose.yml up -d``. Existing files are not overwritten unless
``--force`` is given.
"""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path

PACKAGE = "otel_profiler"
FOLDER = "stack"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("stack", help="write out the Collector/Jaeger/Prometheus/Grafana stack",
                              description=__doc__.splitlines()[0].split(": ", 1)[1])
    p.add_argument("-o", "--output", type=Path, required=True, metavar="DIR",
                   help="folder to write into (made if missing)")
    p.add_argument("--force", action="store_true", help="overwrite files that already exist")
    p.set_defaults(func=run)


def stack_files() -> dict[str, bytes]:
    """Every file of the shipped stack: its path relative to the stack folder -> its bytes."""
    out: dict[str, bytes] = {}

    def walk(node: Traversable, prefix: str) -> None:
        for child in sorted(node.iterdir(), key=lambda c: c.name):
            name = f"{prefix}{child.name}"
            if child.is_dir():
                if child.name != "__pycache__":
                    walk(child, name + "/")
            elif not child.name.endswith((".py", ".pyc")):
                out[name] = child.read_bytes()

    walk(resources.files(PACKAGE).joinpath(FOLDER), "")
    return out


def run(args: argparse.Namespace) -> int:
    files = stack_files()
    if not files:
        print("otel-profiler: error: the stack files are missing from this installation", file=sys.stderr)
        return 2
    out: Path = args.output
    if out.exists() and not out.is_dir():
        print(f"otel-profiler: error: --output {out}: exists and is not a folder", file=sys.stderr)
        return 2
    clashes = [name for name in files if (out / name).exists()]
    if clashes and not args.force:
        print(f"otel-profiler: error: --output {out}: {len(clashes)} file(s) already there, e.g. "
              f"{clashes[0]} (use --force to overwrite)", file=sys.stderr)
        return 2
    try:
        for name, data in files.items():
            target = out / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    except OSError as exc:
        print(f"otel-profiler: error: --output {out}: cannot write: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"wrote {len(files)} files to {out}; start them with: "
          f"docker compose -f {out / 'docker-compose.yml'} up -d")
    return 0
