"""``otel-profiler export INPUT...``: existing traces and profile folders as OTLP spans.

Sends to an OTLP endpoint (``--endpoint``/``--protocol``, else the ``OTEL_EXPORTER_OTLP_*``
variables) and/or writes a file (``--output``: ``.jsonl`` OTLP JSON lines as the Collector's file
exporter writes them, ``.pb`` length-delimited ``ExportTraceServiceRequest`` messages). Uses the
same span model and pipeline as the live exporter, synchronously, one piece of whole steps at a
time (``cuda_tracer.model.batch_pieces``: the same spans as all at once, in bounded memory). The run
id is ``OTEL_PROFILER_RUN_ID``, else the one each profile folder recorded (so the spans get the
trace and span ids the live run sent), else one derived from the inputs' names and profiling
times; one line says which. An endpoint that cannot be reached (refused, no answer within its
timeout, no such host) is said in one line before anything is read: exit 1. Exit 1 when spans
were dropped. ``--format pprof`` writes a pprof
profile of GPU and CPU time by call stack to ``-o`` instead (``export.pprof``, docs/profiles.md);
``--format otlp-profiles`` sends the same as OpenTelemetry profiles to the endpoint (its
``/v1development/profiles`` over HTTP) and/or writes them to ``-o FILE.pb`` (``export.profiles_otlp``).
With ``--scheduler`` (or ``OTEL_PROFILER_SCHEDULER``) and no ``--output``, each rank's spans are
sent by the worker that reads it (``export.cluster_export``), the same spans and ids (docs/cluster.md).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from cuda_tracer.model.batch_pieces import step_pieces

from .. import config
from ..export.export_config import ExportConfig, export_config_from_settings
from ..export.pipeline import Counters, Pipeline
from ..export.sinks import unreachable
from ..names import terminal_safe
from ..profiler_warnings import print_warning
from ..shared.otlp_target import PROTOCOLS
from . import add_inputs, choose_run_ids, load_inputs, progress_bar
from .scheduler import add_scheduler, scheduler_of

SPANS_FILE = "spans.jsonl"
"""The file ``--output FOLDER`` writes in the folder."""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "export", help="export trace files or profile folders as OTLP spans (Jaeger, Tempo)",
        description="Turn Kineto/Chrome traces, folders of per-rank traces or profile folders into "
                    "OpenTelemetry spans (one trace per training step) and send them to an OTLP "
                    "endpoint or write them to a file.")
    add_inputs(p)
    add_scheduler(p, thresholds=False, work="each worker sends its ranks' spans itself")
    p.add_argument("--endpoint", help="OTLP endpoint URL (default: OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT)")
    p.add_argument("--protocol", choices=PROTOCOLS, help="OTLP protocol (default: OTEL_EXPORTER_OTLP_PROTOCOL)")
    p.add_argument("-o", "--output", metavar="FILE", help="also write the spans to FILE: a name ending in "
                                                          ".jsonl (OTLP JSON lines) or .pb (protobuf), or a "
                                                          "folder (written as FOLDER/spans.jsonl); with "
                                                          "--format pprof: the profile file; with --format "
                                                          "otlp-profiles: FILE.pb")
    p.add_argument("--format", choices=("otlp", "pprof", "otlp-profiles"), default="otlp",
                   help="otlp: spans (default); pprof: GPU and operator CPU time by call stack, one "
                        "gzipped pprof file written to -o; otlp-profiles: the same as OpenTelemetry "
                        "profiles, sent to the endpoint and/or written to -o FILE.pb (docs/profiles.md)")
    p.add_argument("--span-budget", metavar="N",
                   help="spans per trace, 10 to 1000000 (default: OTEL_PROFILER_SPAN_BUDGET)")
    p.add_argument("--service-name", help="service.name of the spans (default: OTEL_SERVICE_NAME, "
                                          "else otel-profiler-export)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.format == "pprof":
        return _write_pprof(args)
    settings = config.load()
    for w in settings.warnings:
        print_warning(w)
    try:  # the flags are checked as the variables they stand for
        if args.endpoint is not None:
            config.flag_value("OTEL_EXPORTER_OTLP_ENDPOINT", "--endpoint", args.endpoint)
        budget = None if args.span_budget is None else \
            config.flag_value("OTEL_PROFILER_SPAN_BUDGET", "--span-budget", args.span_budget)
    except config.ConfigError as exc:
        print(f"otel-profiler: error: {exc}", file=sys.stderr)
        return 2
    if args.endpoint or args.protocol:  # flags over the settings' target
        target = settings.traces_target_with(args.endpoint, args.protocol) \
            if (args.endpoint or not args.output) else None
    else:
        target = None if args.output else settings.traces_target
    if args.format == "otlp-profiles":
        from .export_profiles import send_profiles

        return send_profiles(args, settings, target)
    json_file = pb_file = ""
    if args.output:
        if os.path.isdir(args.output):
            args.output = os.path.join(args.output, SPANS_FILE)
        if args.output.endswith((".jsonl", ".json")):
            json_file = args.output
        elif args.output.endswith(".pb"):
            pb_file = args.output
        else:
            print(f"otel-profiler: error: --output {terminal_safe(args.output)}: give a file name ending in "
                  ".jsonl (OTLP JSON lines) or .pb (protobuf), or an existing folder "
                  f"(the spans go to FOLDER/{SPANS_FILE})", file=sys.stderr)
            return 2
    if not target and not args.output:
        print("otel-profiler: error: give --endpoint or --output (or set OTEL_EXPORTER_OTLP_ENDPOINT)",
              file=sys.stderr)
        return 2
    if target is not None:
        why = unreachable(target)
        if why is not None:
            inputs = "the input files are" if len(args.inputs) > 1 else "the input file is"
            print(f"otel-profiler: error: cannot reach {terminal_safe(target.describe())} ({why}); nothing "
                  f"was exported and {inputs} untouched", file=sys.stderr)
            return 1
    export_config = export_config_from_settings(  # only the spans, to what the flags chose, now
        settings, "otel-profiler-export", target=target, json_file=json_file, pb_file=pb_file,
        metrics_target=None, spool_dir="", console_spans=False, console_metrics=False)
    options = export_config.span_options
    options.service_name = args.service_name or options.service_name
    if budget is not None:
        options.budget = budget
    if args.output and args.scheduler:
        print("otel-profiler: error: --output cannot be combined with --scheduler: each worker sends "
              "its ranks' spans to the endpoint, there is no one file to write", file=sys.stderr)
        return 2
    scheduler = None if args.output else scheduler_of(args, args.inputs)  # a file: written here
    if scheduler:
        return export_on_cluster(args, scheduler, export_config)
    profile, status = load_inputs(args)
    print(choose_run_ids(options, profile), file=sys.stderr)
    counters = Counters()
    pipeline = Pipeline(export_config, counters)
    events = sum(len(rank.batch) for rank in profile.ranks)
    try:
        with progress_bar("exporting", " events") as progress:
            for rank in profile.ranks:  # piece by piece: one piece's spans in memory at a time
                for piece in step_pieces(rank.batch, window_ns=options.window_ns):
                    pipeline.handle(rank.meta, piece)
                    if progress:
                        progress(len(piece), events)
    finally:
        pipeline.close()
    code = print_totals(counters.snapshot(), len(profile.ranks), target, args.output)
    return status or code


def print_totals(c: dict[str, int], ranks: int, target: Any, output: str | None) -> int:
    """The closing line of an export (spans built, delivered, dropped); exit code 1 when spans
    were dropped, else 0."""
    where = terminal_safe(", ".join(x for x in (target.describe() if target else "", output or "") if x))
    print(f"exported {c['spans_built']} spans of {ranks} rank(s) to {where}"
          + (f"; {c['spans_exported']} delivered" if target else "")
          + (f"; {c['spans_dropped']} dropped" if c["spans_dropped"] else ""), file=sys.stderr)
    return 1 if c["spans_dropped"] else 0


def export_on_cluster(args: argparse.Namespace, scheduler: str, export_config: ExportConfig) -> int:
    """The ranks of ``args.inputs`` exported by the workers of ``scheduler`` (a Dask address, or
    "local": local processes), each sending its rank's spans to the target itself: a first pass
    learns each rank's recorded run id and number so that the ids are the plain export's; each rank
    that cannot be read is one line (exit 2), the others are exported."""
    from types import SimpleNamespace

    from cuda_tracer.profile import TraceError

    from ..cluster.analyse import rank_sources
    from ..cluster.executor import executor_for
    from ..export.cluster_export import COUNTS, export_rank, rank_identity
    from ..profiler_warnings import print_error

    max_text = args.max_json_mb << 20 if args.max_json_mb else None
    sources = rank_sources(args.inputs)
    refused: list[str] = []
    totals = dict.fromkeys(COUNTS, 0)
    try:
        executor = executor_for(scheduler, args.jobs)
    except RuntimeError as exc:
        raise TraceError(f"--scheduler {scheduler}", str(exc)) from None
    try:
        ranks = []
        for source, found in zip(sources, executor.map(rank_identity, sources, max_text_bytes=max_text)):
            if isinstance(found, str):
                refused.append(found)
            else:
                ranks.append(SimpleNamespace(source=source, meta=found))
        for line in refused[:-1] if not ranks else refused:
            print_error(line if not ranks else f"{line} (left out; the other ranks are used)")
        if not ranks:
            raise TraceError(*refused[-1].split(": ", 1)) if refused else TraceError(", ".join(args.inputs),
                                                                                   "no ranks found")
        _number_unranked([r.meta for r in ranks])
        options = export_config.span_options
        print(choose_run_ids(options, SimpleNamespace(ranks=ranks, sources=sources)), file=sys.stderr)
        items = [(r.source, options.run_id or r.meta["run_id"], r.meta["rank"]) for r in ranks]
        for result in executor.map(export_rank, items, export_config=export_config, max_text_bytes=max_text):
            if isinstance(result, str):  # readable a moment ago: gone or changed since
                refused.append(result)
                print_error(f"{result} (left out; the other ranks are used)")
                continue
            for k in COUNTS:
                totals[k] += result[k]
    except RuntimeError as exc:  # the cluster's failure, not a rank's
        raise TraceError(f"--scheduler {scheduler}", str(exc)) from None
    finally:
        executor.close()
    code = print_totals(totals, len(sources) - len(refused), export_config.target, None)
    return 2 if refused else code


def _number_unranked(metas: list[dict[str, Any]]) -> None:
    """Ranks without a number get the next free one, in input order, as the plain reading numbers them."""
    used = {m["rank"] for m in metas if m["rank"] >= 0}
    nxt = 0
    for m in metas:
        if m["rank"] < 0:
            while nxt in used:
                nxt += 1
            m["rank"] = nxt
            used.add(nxt)


def _write_pprof(args: argparse.Namespace) -> int:
    """``--format pprof``: the inputs' stack profile written to ``-o`` (``export.pprof``)."""
    from cuda_tracer.profile import TraceError

    from ..export import pprof

    if not args.output or args.endpoint or args.protocol:
        print("otel-profiler: error: --format pprof writes a file: give -o FILE.pb.gz (and no "
              "--endpoint or --protocol)", file=sys.stderr)
        return 2
    profile, status = load_inputs(args)
    try:
        totals = pprof.write(profile, args.output)
    except OSError as exc:
        raise TraceError(args.output, f"cannot write ({exc.strerror or exc})") from None
    print(terminal_safe(f"wrote {args.output}: GPU time {totals['gpu_ns'] / 1e6:.3f} ms of "
                        f"{totals['launches']} GPU operations, operators' CPU time "
                        f"{totals['cpu_ns'] / 1e6:.3f} ms, {totals['samples']} samples, "
                        f"{len(profile.ranks)} rank(s)"), file=sys.stderr)
    return status
