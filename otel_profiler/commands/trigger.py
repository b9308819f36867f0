"""``otel-profiler trigger (--port P | --pid PID)``: open a detailed window in a running job.

Sends one UDP datagram to ``127.0.0.1:P`` (the job's ``OTEL_PROFILER_TRIGGER_PORT`` plus its local
rank) or ``SIGUSR2`` to process PID. The job captures its next ``OTEL_PROFILER_WINDOW_STEPS`` steps.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from ..triggers import send


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("trigger", help="capture the next steps of a running job in detail",
                              description=__doc__.splitlines()[0].split(": ", 1)[1])
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--port", type=int, help="the job's trigger port (+ local rank)")
    target.add_argument("--pid", type=int, help="send SIGUSR2 to this process")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        if args.pid is not None:
            os.kill(args.pid, signal.SIGUSR2)
        else:
            send(args.port)
    except (OSError, OverflowError) as exc:
        print(f"otel-profiler: error: cannot trigger: {exc}", file=sys.stderr)
        return 2
    return 0
