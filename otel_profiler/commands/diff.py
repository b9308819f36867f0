"""``otel-profiler diff BASE NEW``: what changed between two runs (trace files or profile folders)."""

from __future__ import annotations

import argparse
import sys

from ..analysis.diff import NO_GPU_NOTE, diff, has_gpu, tables
from ..analysis.summary import summarize
from ..names import terminal_safe
from ..report.console import render_json, table_text, unicode_escaped
from . import count, load_inputs
from .summary import add_scheduler, cluster_inputs, scheduler_of


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "diff", help="compare two runs: step time, GPU breakdown, kernels, operators, memory",
        description="Compare a BASE run with a NEW one (each a Kineto trace file, a folder of "
                    "per-rank traces or a profile folder written by `otel-profiler run`): every "
                    "figure with its base and new value, the change and the change in percent.")
    p.add_argument("base", metavar="BASE", help="the run to compare against (trace file or folder)")
    p.add_argument("new", metavar="NEW", help="the run to compare (trace file or folder)")
    p.add_argument("--format", choices=("table", "json", "html"), default="table",
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
    (``summary.scheduler_of``) through the cluster."""
    summaries, code = [], 0
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
    if args.format == "json":
        text = render_json(d)
    elif args.format == "html":
        from ..report.diff_html import render_diff_html

        text = unicode_escaped(render_diff_html(d, top=args.top))  # may go to a terminal
    else:
        width = max(args.name_width, 0)
        text = "\n".join([terminal_safe(f"base: {', '.join(d['base']['sources'])}"),
                          terminal_safe(f"new:  {', '.join(d['new']['sources'])}"), ""] +
                         ([] if has_gpu(d) else [f"note: {NO_GPU_NOTE}", ""]) +
                         [table_text(t, h, rows, width) for t, h, rows in tables(d, args.top) if rows])
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    else:
        sys.stdout.write(text + "\n")
    return code
