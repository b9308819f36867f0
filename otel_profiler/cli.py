"""The ``otel-profiler`` command line: parses arguments, dispatches to a subcommand module.

Unusable input ends with one line on stderr naming the input and what is wrong, and exit code 2;
every name on that line is made safe for a terminal (``profiler_warnings.print_error``).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from cuda_tracer.profile import TraceError

from .profiler_warnings import print_error
from .version import __version__
from .commands import COMMANDS

EXIT_BAD_INPUT = 2


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs as written; every option's default appended to its help, unless the
    help already says it or there is none to say (no value, a switch that is off)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if "default" in text or default in (None, False, [], argparse.SUPPRESS) or \
                action.nargs in (argparse.REMAINDER, "+", "*"):
            return text
        return f"{text} (default: {default})" if text else f"(default: {default})"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="otel-profiler", formatter_class=HelpFormatter,
        description="GPU-kernel-level profiling of training jobs, exported through OpenTelemetry.",
        epilog="Run `otel-profiler COMMAND --help` for a command's arguments.")
    parser.add_argument("--version", action="version", version=f"otel-profiler {__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands",
                                help="what to do (one of the commands below)")
    for name in COMMANDS:
        importlib.import_module(f"{__package__}.commands.{name}").register(sub)
    for command in sub.choices.values():
        command.formatter_class = HelpFormatter
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
        print_error(str(exc))
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
