"""The ``otel-profiler`` command line: parses arguments, dispatches to a subcommand module.

Start-up is cheap: ``otel-profiler --help`` lists the subcommands from ``commands.COMMANDS`` and
imports none of them; a subcommand's module (its arguments and its implementation) is imported only
when that subcommand is chosen, so ``otel-profiler run`` starts the job without loading the
analysis, report or export code it does not need.

Unusable input ends with one line on stderr naming the input and what is wrong, and exit code 2;
every name on that line is made safe for a terminal (``profiler_warnings.print_error``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from contextlib import contextmanager
from typing import Any, Iterator

from .commands import COMMANDS
from .logs import enable_from_env
from .profiler_warnings import print_error
from .version import __version__

EXIT_BAD_INPUT = 2
BLAS_THREADS = "OPENBLAS_NUM_THREADS"


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


class CommandParser(argparse.ArgumentParser):
    """A subcommand's parser, defined on first use: its module is imported and its ``register``
    run only when the subcommand's arguments are parsed or its help is shown. Without a
    ``command`` (the parsers of a subcommand's own actions) it is a plain parser."""

    def __init__(self, *args: Any, command: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.command = command

    def define(self) -> None:
        """Add the subcommand's arguments (once): its module's ``register`` fills this parser."""
        if self.command is None:
            return
        name, self.command = self.command, None
        module = importlib.import_module(f"{__package__}.commands.{name}")
        module.register(_Into(self))
        self.formatter_class = HelpFormatter

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self.define()
        return super().parse_known_args(args, namespace)

    def format_usage(self) -> str:
        self.define()
        return super().format_usage()

    def format_help(self) -> str:
        self.define()
        return super().format_help()


class _Into:
    """What a subcommand's ``register(subparsers)`` is given: its ``add_parser`` returns the
    subcommand's existing parser with the description (and any other setting) applied. The
    one-line help of ``--help`` comes from ``commands.COMMANDS``."""

    def __init__(self, parser: CommandParser) -> None:
        self.parser = parser

    def add_parser(self, name: str, **kwargs: Any) -> CommandParser:
        kwargs.pop("help", None)
        for key, value in kwargs.items():
            setattr(self.parser, key, value)
        return self.parser


def build_parser(lazy: bool = False) -> argparse.ArgumentParser:
    """The whole command line. ``lazy``: each subcommand's arguments are defined (its module
    imported) only when it is used, as ``main`` does; else all of them now."""
    parser = argparse.ArgumentParser(
        prog="otel-profiler", formatter_class=HelpFormatter,
        description="GPU-kernel-level profiling of training jobs, exported through OpenTelemetry.",
        epilog="Run `otel-profiler COMMAND --help` for a command's arguments.")
    parser.add_argument("--version", action="version", version=f"otel-profiler {__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands",
                                help="what to do (one of the commands below)", parser_class=CommandParser)
    for name, line in COMMANDS.items():
        command = sub.add_parser(name, help=line, formatter_class=HelpFormatter, command=name)
        if not lazy:
            command.define()
    return parser


def _is_trace_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a ``cuda_tracer.profile.TraceError`` (unusable input): one can only have
    been raised once that module is loaded, so it is never imported here."""
    profile = sys.modules.get("cuda_tracer.profile")
    return profile is not None and isinstance(exc, profile.TraceError)


@contextmanager
def _one_blas_thread() -> Iterator[None]:
    """While the chosen subcommand's module is imported: numpy's BLAS library starts one thread,
    not one per core. No subcommand does linear algebra, and the pool's threads would only spin at
    start (about 0.1 s of CPU, taken from the reader's own threads on a small machine). The
    variable is put back before the subcommand runs: a job started by ``run`` inherits nothing,
    and a value the user set is left alone."""
    if BLAS_THREADS in os.environ:
        yield
        return
    os.environ[BLAS_THREADS] = "1"
    try:
        yield
    finally:
        os.environ.pop(BLAS_THREADS, None)


def main(argv: list[str] | None = None) -> int:
    enable_from_env()
    parser = build_parser(lazy=True)
    with _one_blas_thread():
        args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if not _is_trace_error(exc):
            raise
        print_error(str(exc))
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
