"""Capture on demand across a running job, on the rank's side: a daemon thread of its own (never the
training thread) reports this rank's step to the Profiler app (``OTEL_PROFILER_UPLOAD`` with
``OTEL_PROFILER_UPLOAD_TOKEN``) every ``OTEL_PROFILER_REMOTE_POLL_S`` seconds, and hands each
capture request it hears of (``otel-profiler trigger --run``, or the run's page) to the window
policy, which captures those steps as a ``remote`` window. Every rank of the run hears of the same
steps, so the windows line up across ranks.

The app being down, slow or refusing changes nothing in the job: a request is bounded
(``TIMEOUT_S``, ``MAX_REPLY_BYTES``), failures back off to ``MAX_WAIT_S`` between tries, and the
first one is said once (one warning line, without the token or the server's reply). A refusal that
will not change (401, 403, 404) stops the thread with one line. The thread is not waited for at exit.
A process reports only once it has finished a step: a launcher (torchrun's agent) or a helper
process that never trains is not a rank of the job.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable

from ..profiler_warnings import warn

log = logging.getLogger(__name__)

TIMEOUT_S = 5.0
MAX_REPLY_BYTES = 64 << 10
MAX_WAIT_S = 60.0
FINAL = {400, 401, 403, 404}
"""Answers a retry would get again: the thread stops."""


class RemoteCapture:
    """The poll thread of one session. ``position()`` gives ``(rank, step, recent step time in s or
    None)``, or None while the process has not trained; ``capture(first_step, steps)`` asks the
    window policy for those steps."""

    def __init__(self, url: str, token: str, run_id: str, poll_s: float, host: str,
                 position: Callable[[], tuple[int, int, float | None] | None],
                 capture: Callable[[int, int], None]) -> None:
        self.base = url.rstrip("/")
        self._token = token
        self.run_id = run_id
        self.poll_s = poll_s
        self.host = host
        self.position = position
        self.capture = capture
        self.heard: set[int] = set()  # request ids already handed to the policy
        self.reports = 0  # answered reports (for tests and the debug log)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._told = False

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="otel-profiler-remote", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to end (not waited for: a request in flight ends with its timeout)."""
        self._stop.set()

    def _loop(self) -> None:
        wait = self.poll_s
        while not self._stop.wait(wait):
            try:
                self.report_once()
                wait = self.poll_s
            except _Final as exc:
                warn(f"capture requests from the Profiler app are off for this run: {exc}")
                return
            except Exception as exc:  # the app down or slow: try again later, say so once
                if not self._told:
                    self._told = True
                    warn(f"the Profiler app at {self.base} did not answer ({_reason(exc)}); capture requests "
                         "from it wait until it does, the job is not affected")
                log.debug("reporting to the Profiler app failed", exc_info=True)
                wait = min(MAX_WAIT_S, max(wait, self.poll_s) * 2)

    def report_once(self) -> None:
        """Report this rank's step; hand every request not heard of before to the policy."""
        position = self.position()
        if position is None:  # not a training rank (yet): nothing to report
            return
        rank, step, step_s = position
        body = json.dumps({"step": max(step, 0), "step_s": step_s, "poll_s": self.poll_s,
                           "host": self.host}).encode()
        url = f"{self.base}/api/runs/{urllib.parse.quote(self.run_id, safe='')}/ranks/{max(rank, 0)}"
        request = urllib.request.Request(url, data=body, method="POST", headers={
            "Authorization": f"Bearer {self._token}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as reply:
                answer = json.loads(reply.read(MAX_REPLY_BYTES + 1)[:MAX_REPLY_BYTES] or b"{}")
        except urllib.error.HTTPError as exc:
            if exc.code in FINAL:
                raise _Final(f"the app answered {exc.code} for run {self.run_id!r}") from None
            raise
        self.reports += 1
        for item in answer.get("captures") or []:
            if (isinstance(item, dict) and isinstance(item.get("id"), int) and item["id"] not in self.heard
                    and isinstance(item.get("first_step"), int) and isinstance(item.get("steps"), int)):
                self.heard.add(item["id"])
                self.capture(item["first_step"], item["steps"])


class _Final(Exception):
    """A refusal that will not change: the thread stops."""


def _reason(exc: Exception) -> str:
    """One short reason, without the server's reply."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}"
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)[:120]
    return type(exc).__name__


def start_for(session: Any) -> RemoteCapture | None:
    """The poll thread of a session whose settings name an app and a token (and a poll interval),
    started; else None."""
    settings = session.settings
    url, token = settings.upload.strip(), settings.upload_token.strip()
    if not (url and token and settings.remote_poll_s > 0):
        return None

    def position() -> tuple[int, int, float | None] | None:
        if not session.policy.steps_seen:
            return None
        try:
            step_s = session.policy.recent_step_s()
        except RuntimeError:  # the history changed while read: next time
            step_s = None
        return session.rank, session.step, step_s

    remote = RemoteCapture(url, token, session.output.run_id, settings.remote_poll_s, socket.gethostname(),
                           position, session.policy.remote)
    remote.start()
    return remote
