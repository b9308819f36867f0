"""One module per ``otel-profiler`` subcommand; each defines ``register(subparsers)``."""

COMMANDS = ("summary", "report", "diff", "run", "trigger", "export", "replay", "stack")
"""Subcommand modules, in the order ``--help`` lists them."""


def add_inputs(parser) -> None:
    """The trace inputs every reading command takes, and how many processes read them."""
    parser.add_argument("inputs", nargs="+", metavar="INPUT",
                        help="a Kineto/Chrome trace file (.json, .json.gz), a folder of per-rank trace "
                             "files, a profile folder written by `otel-profiler run`, or a TensorFlow "
                             "profile (.xplane.pb or its logdir); several may be given")
    parser.add_argument("-j", "--jobs", type=count, default=None, metavar="N",
                        help="trace files read at once, one process each (default: as many as the "
                             "cores, the files and the free memory allow)")


def count(text: str) -> int:
    """A positive integer (argparse names this function in its error message)."""
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def add_thresholds(parser) -> None:
    """``--threshold NAME=VALUE`` with every threshold name, default and meaning in ``--help``."""
    from ..analysis.insights import thresholds_doc

    parser.add_argument("--threshold", action="append", default=[], metavar="NAME=VALUE",
                        help="override an insight rule's threshold, e.g. gpu_util_low_pct=60 "
                             "(repeatable; names listed below)")
    rows = [f"  {t['name']} = {t['default']:g}: {t['meaning']}" for t in thresholds_doc()]
    parser.epilog = ((parser.epilog + "\n\n") if parser.epilog else "") + \
        "insight thresholds (--threshold NAME=VALUE):\n" + "\n".join(rows)
