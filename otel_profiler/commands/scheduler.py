"""The ``--scheduler`` option of ``summary``, ``report``, ``diff`` and ``export``, and which scheduler
a command reads on. Kept apart from the commands so that none of them loads another's analysis
to define its arguments."""

from __future__ import annotations

import argparse


MERGED = "merge their compact summaries here, with clock offsets per rank and stragglers explained"


def add_scheduler(parser: argparse.ArgumentParser, thresholds: bool = True, work: str = MERGED) -> None:
    """``--scheduler`` (``work``: what the workers' results become), and (``thresholds``) the straggler
    thresholds ``--threshold`` takes with one, listed in the epilog."""
    parser.add_argument("--scheduler", metavar="ADDRESS", default=None,
                        help="read the ranks on the workers of this Dask scheduler (tcp://HOST:PORT; "
                             f"needs the cluster extra) and {work}; 'local': the same on "
                             "local processes (default: OTEL_PROFILER_SCHEDULER, else the ranks are "
                             "read here as before; inputs given as URLs such as s3://bucket/run/ "
                             "are always read the cluster's way)")
    if not thresholds:
        return
    from ..cluster.stragglers import thresholds_doc

    rows = [f"  {t['name']} = {t['default']:g}: {t['meaning']}" for t in thresholds_doc()]
    parser.epilog = ((parser.epilog + "\n\n") if parser.epilog else "") + \
        "straggler thresholds (--threshold NAME=VALUE, with a scheduler):\n" + "\n".join(rows)


def scheduler_of(args: argparse.Namespace, inputs: list[str]) -> str | None:
    """The scheduler to read on: ``--scheduler``, else ``OTEL_PROFILER_SCHEDULER``, else "local" for
    URL inputs; None: the plain reading."""
    if getattr(args, "scheduler", None):
        return args.scheduler
    from .. import config

    configured = config.load().scheduler
    if configured:
        return configured
    return "local" if any("://" in i for i in inputs) else None
