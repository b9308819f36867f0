"""``otel-profiler replay SPOOL``: send spooled (or ``.pb``) OTLP requests to an endpoint later.

SPOOL is a spool folder (``OTEL_PROFILER_SPOOL_DIR``) or one length-delimited ``.pb`` file. Every
request of every file is tried: a file is deleted once all its requests were delivered; requests
the receiver refuses stay in their file, which is named, and the next request is tried; when the
endpoint cannot be reached (after ``OTEL_PROFILER_EXPORT_RETRY_S`` of retries) the rest is left
for later, untried. Nothing that was not sent is deleted: the part of a file that cannot be read
(truncated, a broken length prefix) is set aside as ``NAME.bad`` and named on one line. Exit 1
when something is left or set aside.
"""

from __future__ import annotations

import argparse
import os
import sys

from .. import config
from ..export.sinks import deliver, open_sink
from ..export.sinks.files import DOWN, REFUSED, SENT, drain_file, spool_files
from ..names import terminal_safe
from ..profiler_warnings import print_error, print_warning
from ..shared.otlp_target import PROTOCOLS, endpoint_problem, safe_text


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "replay", help="send spooled OTLP requests to an endpoint",
        description="Send the requests the exporter spooled while the endpoint was down.")
    p.add_argument("spool", metavar="SPOOL", help="spool folder or .pb file")
    p.add_argument("--endpoint", help="OTLP endpoint URL (default: OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT)")
    p.add_argument("--protocol", choices=PROTOCOLS, help="OTLP protocol (default: OTEL_EXPORTER_OTLP_PROTOCOL)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = config.load()
    for w in settings.warnings:
        print_warning(w)
    if not os.path.exists(args.spool):
        print_error(f"{args.spool}: no such file or folder")
        return 2
    if args.endpoint and endpoint_problem(args.endpoint):
        print(f"otel-profiler: error: --endpoint {safe_text(args.endpoint)!r}: {endpoint_problem(args.endpoint)}",
              file=sys.stderr)
        return 2
    target = settings.traces_target_with(args.endpoint, args.protocol) \
        if (args.endpoint or args.protocol) else settings.traces_target
    if target is None:
        print("otel-profiler: error: give --endpoint (or set a valid OTEL_EXPORTER_OTLP_ENDPOINT)",
              file=sys.stderr)
        return 2
    sink = open_sink(target)
    retry_s = settings.export_retry_s
    reasons: list[str] = []

    def send(request: bytes) -> str:
        result, _ = deliver(sink, request, retry_s)
        if result.ok:
            return SENT
        reasons.append(result.message)
        return DOWN if result.retryable else REFUSED

    sent, kept, down, aside = 0, [], "", []
    files = spool_files(args.spool)
    try:
        for path in files:
            if down:
                kept.append((path, "not tried: " + down))
                continue
            reasons.clear()
            try:
                result = drain_file(path, send)
            except OSError as exc:
                kept.append((path, f"cannot read ({exc.strerror or exc.__class__.__name__})"))
                continue
            sent += result.sent
            if result.aside:
                aside.append((path, result))
            if result.kept:
                why = reasons[-1] if reasons else "refused"
                kept.append((path, f"{result.kept} request(s) kept: {why}"))
            if result.stopped:
                down = "the endpoint is unreachable"
    finally:
        sink.close()
    print(f"replayed {sent} request(s) from {len(files)} file(s) to {target.describe()}"
          + (f"; {len(kept)} file(s) kept for later" if kept else "")
          + (f"; {len(aside)} unreadable file(s) set aside" if aside else ""), file=sys.stderr)
    for path, why in kept:
        print(f"otel-profiler: kept {terminal_safe(path)}: {terminal_safe(why)}", file=sys.stderr)
    for path, result in aside:
        print(f"otel-profiler: unreadable {terminal_safe(path)} ({result.problem}): the unreadable part is "
              f"kept in {terminal_safe(result.aside)}, {result.sent} request(s) before it were sent", file=sys.stderr)
    return 1 if kept or aside else 0
