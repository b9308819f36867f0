"""``otel-profiler replay SPOOL``: send spooled (or ``.pb``) OTLP requests to an endpoint later.

SPOOL is a spool folder (``OTEL_PROFILER_SPOOL_DIR``) or one length-delimited ``.pb`` file.
Each file is deleted once all its requests were delivered; what is not delivered stays. Exit 1
when something is left.
"""

from __future__ import annotations

import argparse
import os
import sys

from .. import config
from ..exporter import warn
from ..sinks import PROTOCOLS, deliver, open_sink, resolve_target
from ..sinks.files import drain_file, spool_files


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
        warn(w)
    if not os.path.exists(args.spool):
        print(f"otel-profiler: error: {args.spool}: no such file or folder", file=sys.stderr)
        return 2
    target = resolve_target(settings.values, args.endpoint, args.protocol, warn=warn)
    if target is None:
        print("otel-profiler: error: give --endpoint (or set OTEL_EXPORTER_OTLP_ENDPOINT)", file=sys.stderr)
        return 2
    sink = open_sink(target)
    retry_s = float(settings.values["OTEL_PROFILER_EXPORT_RETRY_S"])
    failure: list[str] = []

    def send(request: bytes) -> bool:
        result, _ = deliver(sink, request, retry_s)
        if not result.ok:
            failure.append(result.message)
        return result.ok

    sent = 0
    files = spool_files(args.spool)
    try:
        for path in files:
            n, done = drain_file(path, send)
            sent += n
            if not done:
                break
    finally:
        sink.close()
    left = [p for p in files if os.path.exists(p)]
    print(f"replayed {sent} request(s) from {len(files) - len(left)} file(s) to {target.describe()}"
          + (f"; {len(left)} file(s) left ({failure[-1]})" if left else ""), file=sys.stderr)
    return 1 if left else 0
