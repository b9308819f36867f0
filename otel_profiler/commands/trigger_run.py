"""``otel-profiler trigger --run RUN_ID --steps N``: capture the same N steps on every rank of a
running job, through the Profiler app its ranks report to (``OTEL_PROFILER_UPLOAD``).

The app picks a step a little ahead that every rank will reach after hearing of the request (ranks
report every ``OTEL_PROFILER_REMOTE_POLL_S`` seconds), and says which; each rank captures those
steps as a ``remote`` window. Members of the run's team (and admins) may ask; a viewer gets 403,
anyone else 404, a run whose ranks stopped reporting one line saying so. The request is in the
app's audit log. Exit 0: the request was made; 1: the app refused it or could not be reached; 2: bad
input (an address that is not http(s), no token).
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.parse
import urllib.request

from ..shared.upload import http_url, shown_url
from ..names import terminal_safe
from ..profiler_warnings import print_error

TIMEOUT_S = 30.0
MAX_REPLY_BYTES = 64 << 10


def request_run_capture(url: str, token: str, run_id: str, steps: int) -> tuple[int, dict]:
    """POST the request; ``(HTTP status, the JSON answer or {})``. Raises OSError when the app
    cannot be reached."""
    target = f"{url.rstrip('/')}/api/runs/{urllib.parse.quote(run_id, safe='')}/captures"
    request = urllib.request.Request(target, data=json.dumps({"steps": steps}).encode(), method="POST",
                                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as reply:
            return reply.status, _json(reply.read(MAX_REPLY_BYTES))
    except urllib.error.HTTPError as exc:
        return exc.code, _json(exc.read(MAX_REPLY_BYTES))


def _json(body: bytes) -> dict:
    try:
        answer = json.loads(body or b"{}")
    except ValueError:
        return {}
    return answer if isinstance(answer, dict) else {}


def run_capture(args: argparse.Namespace, token: str) -> int:
    url = args.url
    problem = http_url(url or "")
    if problem:
        print_error(f"--url {problem}" if url else "--url: the app's address is needed (or OTEL_PROFILER_UPLOAD)")
        return 2
    if not 1 <= args.steps <= 1000:
        print_error(f"--steps {args.steps}: capture 1 to 1000 steps")
        return 2
    try:
        status, answer = request_run_capture(url, token, args.run, args.steps)
    except OSError as exc:
        reason = getattr(exc, "reason", None) or exc
        print_error(f"the Profiler app at {shown_url(url)} cannot be reached ({reason}); nothing was requested")
        return 1
    error = answer.get("error")
    said = error[:300] if isinstance(error, str) else f"HTTP {status}"
    first, count = answer.get("first_step"), answer.get("steps")
    if status != 201 or not isinstance(first, int) or not isinstance(count, int):
        print_error(f"run {args.run}: the app refused the capture ({status}: {said})")
        return 1
    print(f"otel-profiler: run {terminal_safe(args.run)}: every rank captures steps {first}-{first + count - 1} "
          f"(request {answer.get('id')}); each rank hears of it at its next report to the app", file=sys.stderr)
    return 0
