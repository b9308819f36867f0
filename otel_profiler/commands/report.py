"""``otel-profiler report INPUT... -o report.html``: the self-contained HTML report (dashboard,
statistical summary, timeline, insights), or ``--format perfetto`` for a Chrome trace JSON that
Perfetto UI opens. With a scheduler (``--scheduler``, see ``summary``) the ranks are read by the
cluster's workers and the page is the multi-rank one (``otel_profiler.report.cluster_html``): figures,
insights, clock offsets, the rank x step heatmap, the aligned timeline, the collective-wait table."""

from __future__ import annotations

import argparse
import sys

from cuda_tracer.profile import TraceError

from cuda_tracer.private_files import open_private

from ..analysis.document import SummaryDocument
from ..analysis.insights import Thresholds
from ..names import terminal_safe
from ..report.formats import REPORT_FORMATS
from ..report.renderers import CLUSTER_REPORT, RENDERERS, RenderOptions
from . import add_inputs, add_thresholds, load_inputs
from .scheduler import add_scheduler, scheduler_of
from .summary import cluster_inputs, parse_thresholds


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "report", help="self-contained HTML report (or a Perfetto trace) of traces or profile folders",
        description="Write an HTML report (dashboard, statistical summary, timeline, insights) that "
                    "opens offline in a browser, or a Chrome trace JSON for Perfetto UI.")
    add_inputs(p)
    p.add_argument("-o", "--output", required=True, help="file to write (report.html, trace.json)")
    p.add_argument("--format", choices=REPORT_FORMATS, default="html",
                   help="html: the report; perfetto: a Chrome trace JSON for Perfetto UI or "
                        "chrome://tracing")
    add_scheduler(p)
    add_thresholds(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    scheduler = scheduler_of(args, args.inputs)
    thresholds, stragglers = parse_thresholds(args, scheduler)
    if scheduler and args.format == "perfetto":
        raise TraceError("--format perfetto", "needs every event in one process: not with a scheduler "
                                              "(--scheduler, OTEL_PROFILER_SCHEDULER or URL inputs)")
    if scheduler:
        cluster, status = cluster_inputs(args, scheduler, thresholds, stragglers=stragglers)

        def render() -> bytes:
            return CLUSTER_REPORT.data(cluster, RenderOptions())
    else:
        profile, status = load_inputs(args)

        def render() -> bytes:
            return RENDERERS[args.format].data(SummaryDocument(profile, thresholds), RenderOptions())
    try:
        with open_private(args.output, "wb") as f:  # user-only (0600), made before the work
            f.write(render())
    except OSError as exc:
        raise TraceError(args.output, f"cannot write ({exc.strerror or exc})") from None
    print(f"wrote {terminal_safe(args.output)}", file=sys.stderr)
    return status
