"""``otel-profiler upload FOLDER --url URL``: send a profile folder to a Profiler app
(``otel-profiler serve``) as a gzip tar; the API token is read from standard input or ``--token-file``."""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tarfile
import urllib.error
import urllib.parse
import urllib.request

from cuda_tracer.profile import TraceError

from ..app.profile_files import PROFILE_FILE



def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("upload", help="send a profile folder to a Profiler app (otel-profiler serve)",
                              description="Upload a profile folder written by `otel-profiler run` to a Profiler "
                                          "app. The run must belong to your team (its ml.team resource "
                                          "attribute); viewers may not upload.")
    p.add_argument("folder", metavar="FOLDER", help="the profile folder (rank-N.json, rank-N.*.events, summary.json)")
    p.add_argument("--url", required=True, help="the app's address, e.g. http://127.0.0.1:8470")
    p.add_argument("--run-id", help="the run's id in the app (default: the folder's name)")
    p.add_argument("--token-file", default="-", metavar="FILE",
                   help="file holding the API token of `otel-profiler users token` (-: standard input)")
    p.set_defaults(func=run)


def pack(folder: str) -> bytes:
    """The gzip tar of the profile files directly in ``folder`` (nothing else, no links)."""
    names = sorted(n for n in os.listdir(folder) if PROFILE_FILE.fullmatch(n)
                   and os.path.isfile(os.path.join(folder, n)) and not os.path.islink(os.path.join(folder, n)))
    if not any(n.endswith(".json") and n.startswith("rank-") for n in names):
        raise TraceError(folder, "not a profile folder (no rank-N.json)")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name in names:
            archive.add(os.path.join(folder, name), arcname=name, recursive=False)
    return buffer.getvalue()


def read_token(path: str) -> str:
    try:
        text = sys.stdin.readline() if path == "-" else open(path, encoding="utf-8").readline()
    except OSError as exc:
        raise TraceError(path, f"cannot read the token ({exc.strerror or exc})") from None
    token = text.strip()
    if not token:
        raise TraceError(path if path != "-" else "standard input", "no API token")
    return token


def run(args: argparse.Namespace) -> int:
    folder = args.folder.rstrip("/") or args.folder
    if not os.path.isdir(folder):
        raise TraceError(args.folder, "not a folder")
    run_id = args.run_id or os.path.basename(os.path.abspath(folder))
    url = urllib.parse.urlsplit(args.url)
    if url.scheme not in ("http", "https") or not url.netloc:
        raise TraceError("--url", f"{args.url}: not an http(s) address")
    body = pack(folder)
    token = read_token(args.token_file)
    target = f"{args.url.rstrip('/')}/api/runs/{urllib.parse.quote(run_id, safe='')}"
    request = urllib.request.Request(target, data=body, method="PUT", headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/gzip"})
    try:
        with urllib.request.urlopen(request, timeout=600) as response:
            json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        try:
            reason = json.loads(exc.read()).get("error", exc.reason)
        except ValueError:
            reason = exc.reason
        raise TraceError(args.folder, f"refused ({exc.code}: {reason})") from None
    except (urllib.error.URLError, OSError) as exc:
        raise TraceError(args.url, f"cannot reach the app ({getattr(exc, 'reason', exc)})") from None
    print(f"uploaded {folder} as {run_id} ({len(body):,} bytes)", file=sys.stderr)
    return 0
