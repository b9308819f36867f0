"""One module per ``otel-profiler`` subcommand; each defines ``register(subparsers)`` and ``run(args)``.

``COMMANDS`` lists them with the line ``otel-profiler --help`` shows for each, so the command line
imports a subcommand's module only when that subcommand is chosen (``otel_profiler.cli``).
"""

import contextlib
from typing import Any

COMMANDS: dict[str, str] = {
    "summary": "statistical summary of trace files or profile folders",
    "report": "self-contained HTML report (or a Perfetto trace) of traces or profile folders",
    "diff": "compare two runs: step time, GPU breakdown, kernels, operators, memory",
    "run": "profile a command (python train.py, torchrun ...) with no code change",
    "trigger": "capture the next steps of a running job in detail",
    "export": "export trace files or profile folders as OTLP spans (Jaeger, Tempo)",
    "replay": "send spooled OTLP requests to an endpoint",
    "stack": "write out the Collector/Jaeger/Prometheus/Grafana stack",
    "serve": "the Profiler app: a web application over a profile store",
    "users": "grant, change and remove access to the Profiler app",
    "teams": "add, remove and list the Profiler app's teams",
    "upload": "send a profile folder to a Profiler app (otel-profiler serve)",
}
"""Subcommand module -> its one-line help, in the order ``--help`` lists them."""


def add_inputs(parser) -> None:
    """The trace inputs every reading command takes, and how many processes read them."""
    parser.add_argument("inputs", nargs="+", metavar="INPUT",
                        help="a Kineto/Chrome trace file (.json, .json.gz), a folder of per-rank trace "
                             "files, a profile folder written by `otel-profiler run`, or a TensorFlow "
                             "profile (.xplane.pb or its logdir); several may be given")
    parser.add_argument("-j", "--jobs", type=count, default=None, metavar="N",
                        help="processes reading traces: several files at once (default: as many as the "
                             "cores, the files and the free memory allow), or the pieces of one large "
                             "file (only when N > 1 is given; 1: one process)")
    parser.add_argument("--max-json-mb", type=count, default=None, metavar="MB",
                        help="the most JSON text (MiB) one gzip trace may decompress to (default: "
                             "100 times its compressed size, at least 64 MiB)")


def load_inputs(args) -> tuple:
    """The profile of ``args.inputs`` and the exit code so far: each unreadable rank file is named
    on one line of stderr and left out (exit code 2, the other ranks are still used); raises
    ``TraceError`` when nothing is readable, or when the inputs are not the ranks of one job
    (unless ``args.separate``). A rank whose over-long strings were cut is named on one line."""
    from cuda_tracer.loading import load_profile
    from cuda_tracer.trace_json.columns import MAX_STRING_CHARS

    from ..profiler_warnings import print_error, print_warning

    max_text = args.max_json_mb << 20 if getattr(args, "max_json_mb", None) else None
    with progress_bar("reading", "B") as progress:
        profile = load_profile(args.inputs, workers=args.jobs, skip_bad=True,
                               max_text_bytes=max_text, one_job=not getattr(args, "separate", False),
                               progress=progress)
    if not profile.ranks and profile.refused:
        for exc in profile.refused[:-1]:
            print_error(str(exc))
        raise profile.refused[-1]
    for exc in profile.refused:
        print_error(f"{exc} (left out; the other ranks are used)")
    for rank in profile.ranks:
        if rank.meta.get("strings_cut"):
            print_warning(f"{rank.meta.get('file') or rank.meta.get('source')}: {rank.meta['strings_cut']:,} "
                          f"string(s) longer than {MAX_STRING_CHARS:,} characters cut to that length")
    return profile, 2 if profile.refused else 0


PROGRESS_DELAY_S = 2.0
"""A progress bar shows only for work that takes longer than this."""


@contextlib.contextmanager
def progress_bar(what: str, unit: str):
    """A progress bar on stderr (tqdm) for work longer than ``PROGRESS_DELAY_S``, when stderr is a
    terminal; yields ``update(done, total)``, or None when there is no bar."""
    import sys

    if not sys.stderr.isatty():
        yield None
        return
    from tqdm import tqdm

    bar = tqdm(desc=what, total=0, unit=unit, unit_scale=True, unit_divisor=1024 if unit == "B" else 1000,
               delay=PROGRESS_DELAY_S, leave=False, file=sys.stderr)

    def update(done: int, total: int) -> None:
        if bar.total != total:
            bar.total = total
        bar.update(done)
        if bar.n >= total:
            bar.refresh()  # the last state shows, however soon after the one before

    try:
        yield update
    finally:
        bar.close()


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


def choose_run_ids(options: Any, profile: Any) -> str:
    """Settle the run id of every rank (``options.run_id`` set: it for all; else each rank's
    recorded ``run_id``, a derived one for ranks without) and say in one line where it came from
    (``export``: spans, ``export --format otlp-profiles``: profiles, so the two get the same ids)."""
    from ..shared.otlp_target import safe_text
    from ..shared.ids import hash_bytes, run_id_of_sources

    if options.run_id:
        return f"run id {safe_text(options.run_id, 80)} (OTEL_PROFILER_RUN_ID)"
    recorded = sorted({str(r.meta["run_id"]) for r in profile.ranks if r.meta.get("run_id")})
    bare = [r for r in profile.ranks if not r.meta.get("run_id")]
    shown = ", ".join(safe_text(x, 80) for x in recorded[:3]) + (", ..." if len(recorded) > 3 else "")
    if len(recorded) == 1 and not bare:
        options.run_id = recorded[0]
        return f"run id {shown}, as recorded in the profile: the trace and span ids of the live run"
    derived = hash_bytes(run_id_of_sources(profile.sources),
                         *sorted(str(r.meta.get("profiler_window_ns")) for r in bare)).hex()
    for rank in bare:
        rank.meta["run_id"] = derived
    if not recorded:
        return f"run id {derived}, derived from the inputs' names and times (none is recorded in them)"
    return (f"run ids {shown}, as recorded in the profiles: the trace and span ids of the live runs"
            + (f"; {derived} for the {len(bare)} rank(s) that record none" if bare else ""))
