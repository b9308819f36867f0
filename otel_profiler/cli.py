"""The ``otel-profiler`` command line: parses arguments, dispatches to a subcommand module.

Unusable input ends with one line on stderr naming the input and what is wrong, and exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from cuda_tracer.profile import TraceError

from . import __version__
from .commands import COMMANDS

EXIT_BAD_INPUT = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="otel-profiler",
        description="GPU-kernel-level profiling of training jobs, exported through OpenTelemetry.")
    parser.add_argument("--version", action="version", version=f"otel-profiler {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"{__package__}.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        return int(args.func(args) or 0)
    except TraceError as exc:
        print(f"otel-profiler: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
