"""``summary.json`` of a profile folder, written after the job by a detached low-priority process.

Summarizing reads every rank's parts back: on a 6,000-step x 1,000-annotation run it took 1.8 GB
and 9 s, which a training process must never pay at its exit (a memory-limited container would
kill the job at its very end). So when a profiled process ends with
``OTEL_PROFILER_SUMMARY_AT_EXIT`` on (the default outside ``otel-profiler run``; ``run``
summarizes after the job itself), it only calls :func:`start`, which takes the folder's
``summary.lock`` (created exclusively; a lock whose process is gone is taken over) and spawns this
module in a session of its own, its input and output on ``/dev/null``, and returns at once. So one
summarizer per folder, whatever the number of ranks, and it never prints into the job's output.

The summarizer (``python -m otel_profiler.live.summary_later FOLDER``) lowers its priority
(nice 19), waits until no live process holds a rank of the folder (every rank has ended; at most
``WAIT_RANKS_S``), writes ``summary.json``, does it again if a rank wrote meanwhile, and removes
its lock. Any failure ends it silently: ``otel-profiler summary FOLDER`` (named in the job's exit
line) gives the same summary. Then, with ``OTEL_PROFILER_UPLOAD`` and its token set, it uploads the
folder to that Profiler app (``shared.upload``: spooled first, retried with backoff for a bounded
time; what is still not delivered waits for ``otel-profiler upload --retry`` or the next upload).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time

from .output import holder_dead

log = logging.getLogger(__name__)

LOCK_NAME = "summary.lock"
WAIT_RANKS_S = 6 * 3600.0
"""The summarizer waits this long at most for the folder's other ranks to end."""
POLL_S = 0.2


def start(folder: str, exiting: bool) -> int | None:
    """Start the folder's summarizer unless one runs already; its pid, or None. Never raises.
    ``exiting``: the interpreter is ending (nobody needs to reap the process; otherwise a daemon
    thread does, so a long-lived program that stopped its profiler keeps no zombie)."""
    try:
        lock = os.path.join(folder, LOCK_NAME)
        if not _take(lock):
            return None
        pid = _spawn(folder)
        with open(lock, "w") as f:  # the lock now names the summarizer, who removes it when done
            f.write(str(pid))
        if not exiting:
            threading.Thread(target=os.waitpid, args=(pid, 0), name="otel-profiler-summary-reaper",
                             daemon=True).start()
        return pid
    except Exception:
        log.debug("the later summary could not be started", exc_info=True)
        return None


def _take(lock: str) -> bool:
    """Create the lock exclusively (holding this process's pid until the summarizer's is known),
    or take over one whose process is gone."""
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            if not holder_dead(lock):
                return False
            try:
                os.unlink(lock)
            except FileNotFoundError:
                pass
            continue
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        return True
    return False


def _spawn(folder: str) -> int:
    """The summarizer, detached: a new session, no terminal, nothing of the job's output."""
    from .wiring import EXPORTER_CHILD_ENV

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {k: v for k, v in os.environ.items() if k != "OTEL_PROFILER_ENABLED"}
    env[EXPORTER_CHILD_ENV] = "1"  # no session starts there, whatever starts it
    env["PYTHONPATH"] = root  # this package; no bootstrap (ours, opentelemetry-instrument's) runs there
    devnull = os.devnull
    actions = [(os.POSIX_SPAWN_OPEN, 0, devnull, os.O_RDONLY, 0),
               (os.POSIX_SPAWN_OPEN, 1, devnull, os.O_WRONLY, 0),
               (os.POSIX_SPAWN_OPEN, 2, devnull, os.O_WRONLY, 0)]
    return os.posix_spawn(sys.executable, [sys.executable, "-m", __name__, folder], env,
                          file_actions=actions, setsid=True)


def _rank_holders_alive(folder: str) -> bool:
    """Whether a live process other than this one holds a rank of the folder."""
    for name in os.listdir(folder):
        if name.startswith("rank-") and name.endswith(".lock"):
            if not holder_dead(os.path.join(folder, name)):
                return True
    return False


def _written(folder: str) -> dict[str, float]:
    """Every rank file's modification time: what the summary was made of."""
    out = {}
    for name in os.listdir(folder):
        if name.startswith("rank-") and not name.endswith(".lock"):
            try:
                out[name] = os.stat(os.path.join(folder, name)).st_mtime
            except OSError:
                pass
    return out


def summarize_when_done(folder: str) -> None:
    """Wait for the folder's ranks to end, then write ``summary.json`` (again if a rank wrote
    while it was being made, at most three times)."""
    from .output import write_summary

    deadline = time.monotonic() + WAIT_RANKS_S
    made_of = None
    for _ in range(3):
        while _rank_holders_alive(folder) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        now = _written(folder)
        if now == made_of:
            return
        made_of = now
        write_summary(folder)


def upload_after(folder: str) -> None:
    """With ``OTEL_PROFILER_UPLOAD`` and ``OTEL_PROFILER_UPLOAD_TOKEN`` set: spool the folder's
    upload in the upload spool beside it (``shared.upload.spool_beside``) and deliver it (with the spool's other
    uploads to that app), retrying for a bounded time."""
    from .. import config
    from ..shared import upload

    settings = config.load(os.environ)
    url, token = settings.upload.strip(), settings.upload_token.strip()
    if not url or not token or upload.http_url(url):
        return
    spool = upload.spool_beside(folder)
    upload.spool_upload(spool, url, folder, os.path.basename(os.path.abspath(folder)))
    upload.deliver_with_retries(spool, token, url)


def main(argv: list[str]) -> int:
    folder = argv[0]
    try:
        os.nice(19)
    except OSError:
        pass
    code = 0
    try:
        summarize_when_done(folder)
    except Exception:
        log.debug("the later summary failed", exc_info=True)
        code = 1
    finally:
        try:
            os.unlink(os.path.join(folder, LOCK_NAME))
        except OSError:
            pass
    try:
        upload_after(folder)  # after the lock is gone: a long retry never holds the folder's summarizer
    except Exception:
        log.debug("the upload after the summary failed", exc_info=True)
        code = 1
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
