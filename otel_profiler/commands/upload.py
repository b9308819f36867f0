"""``otel-profiler upload FOLDER --url URL``: send a profile folder to a Profiler app (``otel-profiler
serve``); ``otel-profiler upload --retry``: deliver the uploads waiting in the upload spool (jobs whose
app could not be reached at exit). The API token comes from ``--token-file``, else
``OTEL_PROFILER_UPLOAD_TOKEN``, else standard input; it is never printed."""

from __future__ import annotations

import argparse
import os
import sys

from cuda_tracer.profile import TraceError

from .. import config
from ..shared import upload as client


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("upload", help="send a profile folder to a Profiler app (otel-profiler serve)",
                              description="Upload a profile folder written by `otel-profiler run` to a Profiler "
                                          "app. The run must belong to your team (its ml.team resource "
                                          "attribute); viewers may not upload. With --retry, deliver the "
                                          "uploads waiting in the upload spool instead.")
    p.add_argument("folder", metavar="FOLDER", nargs="?",
                   help="the profile folder (rank-N.json, rank-N.*.events, summary.json)")
    p.add_argument("--url", help="the app's address, e.g. http://127.0.0.1:8470")
    p.add_argument("--run-id", help="the run's id in the app (default: the folder's name)")
    p.add_argument("--token-file", metavar="FILE",
                   help="file holding the API token of `otel-profiler users token` (-: standard input; "
                        "default: OTEL_PROFILER_UPLOAD_TOKEN, else standard input)")
    p.add_argument("--retry", action="store_true",
                   help="deliver every upload waiting in the upload spool (an app that was down at a job's "
                        "exit), refused ones included")
    p.add_argument("--spool", metavar="DIR",
                   help="the upload spool (default: $OTEL_PROFILER_OUTPUT_DIR/upload-spool)")
    p.set_defaults(func=run)


def default_spool(environ=None) -> str:
    """The upload spool jobs use: ``OTEL_PROFILER_OUTPUT_DIR/upload-spool``, absolute."""
    return os.path.abspath(os.path.join(config.load(environ).output_dir, client.SPOOL_NAME))


def read_token(path: str | None) -> str:
    if path is None:
        from_env = os.environ.get(client.TOKEN_VARIABLE, "").strip()
        if from_env:
            return from_env
        path = "-"
    try:
        if path == "-":
            text = sys.stdin.readline()
        else:
            with open(path, encoding="utf-8") as f:
                text = f.readline()
    except OSError as exc:
        raise TraceError(path, f"cannot read the token ({exc.strerror or exc})") from None
    token = text.strip()
    if not token:
        raise TraceError(path if path != "-" else "standard input", "no API token")
    return token


def run(args: argparse.Namespace) -> int:
    spool = os.path.abspath(args.spool) if args.spool else default_spool()
    if args.retry:
        if args.folder or args.url or args.run_id:
            raise TraceError("--retry", "takes no FOLDER, --url or --run-id (it sends what the spool holds)")
        return retry(spool, read_token(args.token_file))
    if not args.folder or not args.url:
        raise TraceError("upload", "give FOLDER and --url URL, or --retry")
    folder = args.folder.rstrip("/") or args.folder
    if not os.path.isdir(folder):
        raise TraceError(args.folder, "not a folder")
    run_id = args.run_id or os.path.basename(os.path.abspath(folder))
    problem = client.http_url(args.url)
    if problem:
        raise TraceError("--url", problem)
    try:
        client.profile_files(folder)  # not a profile folder: said before the token is asked for
        token = read_token(args.token_file)
        outcome = client.upload_folder(args.url, folder, run_id, token)
    except client.NotAProfileFolder as exc:
        raise TraceError(exc.folder, exc.reason) from None
    if outcome.state == "unreachable":
        try:
            client.spool_upload(spool, args.url, folder, run_id)
        except OSError as exc:
            raise TraceError(client.shown_url(args.url), f"{outcome.detail}; cannot spool it in {spool} "
                                                         f"({exc.strerror or exc})") from None
        raise TraceError(client.shown_url(args.url), f"{outcome.detail}; spooled in {spool}: "
                                                     "`otel-profiler upload --retry` delivers it")
    if outcome.state != "delivered":
        raise TraceError(args.folder, outcome.detail)
    print(f"{folder}: {outcome.detail}", file=sys.stderr)
    for attempt in client.deliver_pending(spool, token, args.url):  # the next upload delivers the spooled ones
        _say(attempt)
    return 0


def retry(spool: str, token: str) -> int:
    """Deliver every record of the spool; 0 when none is left waiting, 1 otherwise."""
    if not client.pending(spool):
        print(f"otel-profiler: no upload waits in {spool}", file=sys.stderr)
        return 0
    for attempt in client.deliver_pending(spool, token, retry_refused=True):
        _say(attempt)
    left = len(client.pending(spool))
    if left:
        print(f"otel-profiler: {left} upload(s) still wait in {spool} (`otel-profiler upload --retry` "
              "again later)", file=sys.stderr)
        return 1
    print(f"otel-profiler: every upload of {spool} is delivered", file=sys.stderr)
    return 0


def _say(attempt: client.Attempt) -> None:
    state = "delivered" if attempt.outcome.settled else "not delivered"
    print(f"otel-profiler: {state}: {attempt.folder} to {client.shown_url(attempt.url)}: {attempt.outcome.detail}",
          file=sys.stderr)
