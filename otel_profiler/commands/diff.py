"""``otel-profiler diff BASE NEW``: what changed between two runs (trace files or profile folders)."""

from __future__ import annotations

import argparse
import sys

from ..analysis.diff import diff
from ..analysis.summary import summarize
from ..analysis.summary_schema import Summary
from ..report.diff_renderers import DIFF_RENDERERS
from ..report.formats import DIFF_FORMATS
from ..report.renderers import RenderOptions
from . import count, load_inputs
from .scheduler import add_scheduler, scheduler_of
from .summary import cluster_inputs


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "diff", help="compare two runs: step time, GPU breakdown, kernels, operators, memory",
        description="Compare a BASE run with a NEW one (each a Kineto trace file, a folder of "
                    "per-rank traces or a profile folder written by `otel-profiler run`): every "
                    "figure with its base and new value, the change and the change in percent.")
    p.add_argument("base", metavar="BASE", help="the run to compare against (trace file or folder)")
    p.add_argument("new", metavar="NEW", help="the run to compare (trace file or folder)")
    p.add_argument("--format", choices=DIFF_FORMATS, default="table",
                   help="table: text for a person (changed rows only); json: every figure (the "
                        "documented diff schema); html: a self-contained comparison page")
    p.add_argument("--top", type=int, default=20,
                   help="rows per kernel and operator table (table and html formats)")
    p.add_argument("--name-width", type=int, default=90, metavar="N",
                   help="longest name before it is cut with … (table format; 0: never cut)")
    p.add_argument("-o", "--output", help="write to this file instead of standard output "
                                          "(default: standard output)")
    p.add_argument("-j", "--jobs", type=count, default=None, metavar="N",
                   help="trace files read at once per run, one process each (default: as many as "
                        "the cores, the files and the free memory allow)")
    add_scheduler(p, thresholds=False)
    p.set_defaults(func=run)


def compare(base: str, new: str, jobs: int | None = None, scheduler: str | None = None) -> tuple[dict, int]:
    """The diff of two runs given by path, and the exit code so far (2 when a rank file was left
    out); read as every reading command reads its inputs (``load_inputs``), or on ``scheduler``
    (``scheduler.scheduler_of``) through the cluster."""
    summaries: list[Summary] = []
    code = 0
    for path in (base, new):
        args = argparse.Namespace(inputs=[path], jobs=jobs, max_json_mb=None, separate=False)
        if scheduler:
            doc, read_code = cluster_inputs(args, scheduler, None)
            summaries.append(doc.summary)
        else:
            profile, read_code = load_inputs(args)
            summaries.append(summarize(profile))
        code = max(code, read_code)
    return diff(*summaries), code


def run(args: argparse.Namespace) -> int:
    d, code = compare(args.base, args.new, args.jobs, scheduler_of(args, [args.base, args.new]))
    text = DIFF_RENDERERS[args.format].text(d, RenderOptions(top=args.top, name_width=args.name_width))
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    else:
        sys.stdout.write(text + "\n")
    return code
