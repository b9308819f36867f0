"""``otel-profiler summary INPUT...``: the statistical summary of traces or a profile folder; with
``--scheduler`` (or ``OTEL_PROFILER_SCHEDULER``), or inputs given as URLs, the ranks are read by the
workers of a Dask cluster or of local processes and merged (``otel_profiler.cluster``). The
cluster's reading is shared with ``report`` and ``diff`` from here (the scheduler's option: ``scheduler``)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Iterable

from cuda_tracer.jobs import name_of, split_jobs
from cuda_tracer.private_files import open_private
from cuda_tracer.profile import TraceError

from ..analysis.document import SummaryDocument
from ..analysis.insights import Thresholds
from ..cluster.document import ClusterDocument
from ..names import terminal_safe
from ..report.console import render_json
from ..report.formats import SUMMARY_FORMATS
from ..report.renderers import SUMMARY_RENDERERS, RenderOptions
from . import add_inputs, add_thresholds, load_inputs
from .scheduler import add_scheduler, scheduler_of


def parse_thresholds(args: argparse.Namespace, scheduler: str | None) -> tuple[Thresholds, Any]:
    """The insight thresholds of ``--threshold`` and, with a scheduler, the straggler thresholds
    (``cluster.stragglers.StragglerThresholds``; None without one); raises ``TraceError``."""
    try:
        if scheduler:
            from ..cluster.stragglers import split_thresholds

            stragglers, rest = split_thresholds(args.threshold)
            return Thresholds.parse(rest), stragglers
        return Thresholds.parse(args.threshold), None
    except ValueError as exc:
        raise TraceError("--threshold", str(exc)) from None


def cluster_inputs(args: argparse.Namespace, scheduler: str, thresholds: Thresholds | None,
                   inputs: list[str] | None = None, stragglers: Any = None) -> tuple[ClusterDocument, int]:
    """The merged summary of ``inputs`` (default ``args.inputs``) read on ``scheduler`` and the exit
    code so far: each rank that cannot be read is one error line, the others are used (exit 2)."""
    from ..cluster.analyse import analyse
    from ..profiler_warnings import print_error

    max_mb = getattr(args, "max_json_mb", None)
    try:
        result = analyse(inputs or args.inputs, scheduler, thresholds, workers=getattr(args, "jobs", None),
                         max_text_bytes=max_mb << 20 if max_mb else None,
                         **({"straggler_thresholds": stragglers} if stragglers else {}))
    except RuntimeError as exc:  # the cluster's or the processes' failure, not a rank's
        raise TraceError(f"--scheduler {scheduler}", str(exc)) from None
    for line in result.refused:
        print_error(f"{line} (left out; the other ranks are used)")
    doc = ClusterDocument(result.summary, thresholds or Thresholds(), thresholds is not None, result.lanes)
    return doc, 2 if result.refused else 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "summary", help="statistical summary of trace files or profile folders",
        description="Summarize Kineto/Chrome trace files (.json, .json.gz), folders of per-rank "
                    "traces, or profile folders written by `otel-profiler run`.")
    add_inputs(p)
    p.add_argument("--format", choices=SUMMARY_FORMATS, default="table",
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
    add_scheduler(p)
    add_thresholds(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    scheduler = scheduler_of(args, args.inputs)
    thresholds, stragglers = parse_thresholds(args, scheduler)
    if scheduler:
        if args.separate:
            raise TraceError("--separate", "cannot be combined with a scheduler (--scheduler, "
                                           "OTEL_PROFILER_SCHEDULER or URL inputs)")
        doc, status = cluster_inputs(args, scheduler, thresholds, stragglers=stragglers)
        if args.format == "json":  # written as encoded: one rank's section in memory at a time
            from ..report.console import unicode_escaped

            chunks = json.JSONEncoder(indent=1, ensure_ascii=False).iterencode(doc.summary)
            return _write(args, (unicode_escaped(c) for c in chunks), status)
        text = _render(args, doc)
        if args.format == "table":
            from ..report.cluster_text import cluster_text

            lines = cluster_text(doc.summary, args.top).split("\n")
            text = "\n".join([text, ""] + [terminal_safe(line) for line in lines])
        return _write(args, [text], status)
    profile, status = load_inputs(args)
    if args.separate:
        text = _render_jobs(args, split_jobs(profile), thresholds)
    else:
        text = _render(args, SummaryDocument(profile, thresholds))
    return _write(args, [text], status)


def _write(args: argparse.Namespace, chunks: Iterable[str], status: int) -> int:
    """The text (in pieces) and a newline to ``-o`` or standard output; the exit code."""
    if args.output:  # user-only, like the profile it summarizes (it names the code's kernels)
        try:
            with open_private(args.output, "w") as f:
                f.writelines(chunks)
                f.write("\n")
        except OSError as exc:
            raise TraceError(args.output, f"cannot write ({exc.strerror or exc})") from None
    else:
        sys.stdout.writelines(chunks)
        sys.stdout.write("\n")
    return status


def _render(args: argparse.Namespace, doc: SummaryDocument | ClusterDocument) -> str:
    return SUMMARY_RENDERERS[args.format].text(doc, RenderOptions(top=args.top, name_width=args.name_width))


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
