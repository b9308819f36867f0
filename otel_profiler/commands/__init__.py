"""One module per ``otel-profiler`` subcommand; each defines ``register(subparsers)``."""

COMMANDS = ("summary", "report", "run", "trigger", "export", "replay")
"""Subcommand modules, in the order ``--help`` lists them."""


def add_inputs(parser) -> None:
    """The trace inputs every reading command takes, and how many processes read them."""
    parser.add_argument("inputs", nargs="+", metavar="INPUT")
    parser.add_argument("-j", "--jobs", type=count, default=None, metavar="N",
                        help="trace files read at once, one process each (default: as many as the "
                             "cores, the files and the free memory allow)")


def count(text: str) -> int:
    """A positive integer (argparse names this function in its error message)."""
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value
