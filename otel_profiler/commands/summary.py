"""``otel-profiler summary INPUT...``: the statistical summary of traces or a profile folder."""

from __future__ import annotations

import argparse
import sys

from cuda_tracer.jobs import name_of, split_jobs
from cuda_tracer.private_files import open_private
from cuda_tracer.profile import TraceError

from ..analysis.document import SummaryDocument
from ..analysis.insights import Thresholds
from ..names import terminal_safe
from ..report.console import render_json
from ..report.renderers import RENDERERS, RenderOptions
from . import add_inputs, add_thresholds, load_inputs


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "summary", help="statistical summary of trace files or profile folders",
        description="Summarize Kineto/Chrome trace files (.json, .json.gz), folders of per-rank "
                    "traces, or profile folders written by `otel-profiler run`.")
    add_inputs(p)
    p.add_argument("--format", choices=("table", "json", "csv"), default="table",
                   help="table: text for a person (sections the profile lacks folded into one "
                        "line, short kernel names); json: every figure (the documented summary "
                        "schema); csv: every table, full names")
    p.add_argument("--top", type=int, default=20, help="rows per table (table format)")
    p.add_argument("--name-width", type=int, default=90, metavar="N",
                   help="longest name or cell before it is cut with … (table format; 0: never cut)")
    p.add_argument("-o", "--output", help="write to this file instead of standard output "
                                          "(default: standard output)")
    p.add_argument("--separate", action="store_true",
                   help="when the inputs are not the ranks of one job (different world sizes, the "
                        "same rank twice, recorded at different times), summarize each job on its "
                        "own instead of refusing them (JSON: {\"jobs\": [summary, ...]})")
    add_thresholds(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        thresholds = Thresholds.parse(args.threshold)
    except ValueError as exc:
        raise TraceError("--threshold", str(exc)) from None
    profile, status = load_inputs(args)
    if args.separate:
        text = _render_jobs(args, split_jobs(profile), thresholds)
    else:
        text = _render(args, SummaryDocument(profile, thresholds))
    if args.output:  # user-only, like the profile it summarizes (it names the code's kernels)
        try:
            with open_private(args.output, "w") as f:
                f.write(text + "\n")
        except OSError as exc:
            raise TraceError(args.output, f"cannot write ({exc.strerror or exc})") from None
    else:
        sys.stdout.write(text + "\n")
    return status


def _render(args: argparse.Namespace, doc: SummaryDocument) -> str:
    return RENDERERS[args.format](doc, RenderOptions(top=args.top, name_width=args.name_width))


def _render_jobs(args: argparse.Namespace, jobs: list, thresholds) -> str:
    """Each job's summary on its own: a JSON object ``{"jobs": [...]}``, or one table (CSV) per job
    under a heading that names its files."""
    docs = [SummaryDocument(job, thresholds) for job in jobs]
    if args.format == "json":
        return render_json({"jobs": [doc.summary for doc in docs]})
    parts = []
    for i, (job, doc) in enumerate(zip(jobs, docs), 1):
        heading = terminal_safe(f"job {i} of {len(jobs)}: {', '.join(name_of(r) for r in job.ranks)}")
        heading = f"# {heading}" if args.format == "csv" else f"{heading}\n{'=' * min(len(heading), 100)}"
        parts.append(f"{heading}\n{_render(args, doc)}")
    return "\n\n".join(parts)
