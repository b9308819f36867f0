"""Uploading profile folders to a Profiler app (``otel-profiler serve``).

A folder's profile files go as one gzip tar in ``PUT /api/runs/RUN_ID`` with an API token. An upload
that cannot be delivered now waits in the *upload spool*: a user-only (0700) folder of small records
(0600) that name the folder, its run id and the app; never the token, never the data (the folder is
packed again when it is sent). Records are retried with backoff for a bounded time by a detached
process, and by ``otel-profiler upload --retry`` or the next upload. Standard library only. Nothing
here prints: outcomes are one-line texts without the token and without the server's raw reply.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import sys
import tarfile
import tempfile
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Mapping

from cuda_tracer.private_files import UnsafeFolderError, check_private_dir, make_private_dir, open_private

log = logging.getLogger(__name__)

PROFILE_FILE = re.compile(r"(rank-\d+\.(json|\d+\.events)|summary\.json|"
                          r"memory-snapshot\.rank-\d+\.[A-Za-z0-9_-]+\.pickle)")
"""A file of a profile folder: rank metadata and event parts, the summary, memory snapshots."""
SPOOL_NAME = "upload-spool"
"""The upload spool's folder name, under ``OTEL_PROFILER_OUTPUT_DIR``."""
TOKEN_VARIABLE = "OTEL_PROFILER_UPLOAD_TOKEN"
RETRY_S = 900.0
"""How long the detached process keeps retrying an app that cannot be reached."""
FIRST_WAIT_S, MAX_WAIT_S = 1.0, 60.0
MAX_PENDING = 1000
"""At most this many records wait in a spool; past it a new upload is not spooled."""
SEND_TIMEOUT_S = 60.0
"""Per network operation (connect, each read or write), not for the whole body."""
RETRYABLE = {408, 425, 429, 500, 502, 503, 504}


class NotAProfileFolder(Exception):
    """``folder`` cannot be uploaded (``reason`` says why)."""

    def __init__(self, folder: str, reason: str) -> None:
        super().__init__(f"{folder}: {reason}")
        self.folder, self.reason = folder, reason


@dataclass(frozen=True)
class Outcome:
    """What became of one upload: ``delivered``, ``exists`` (the app has a run of that id),
    ``refused`` (a final 4xx), ``unreachable`` (retry later) or ``gone`` (the folder is no more)."""

    state: str
    detail: str

    @property
    def settled(self) -> bool:
        """Nothing more to do for this upload (delivered, or the app has it)."""
        return self.state in ("delivered", "exists", "gone")


def http_url(url: str) -> str | None:
    """Why ``url`` is not usable as the app's address (None when it is)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{shown_url(url)}: not an http(s) address"
    return None


def shown_url(url: str) -> str:
    """``url`` with any user:password part shown as ``***``."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1]))


def profile_files(folder: str) -> list[str]:
    """The profile files directly in ``folder`` (plain files, no links); ``NotAProfileFolder``
    unless it is a profile folder."""
    try:
        names = sorted(n for n in os.listdir(folder) if PROFILE_FILE.fullmatch(n)
                       and os.path.isfile(os.path.join(folder, n)) and not os.path.islink(os.path.join(folder, n)))
    except OSError as exc:
        raise NotAProfileFolder(folder, f"cannot read the folder ({exc.strerror or exc})") from None
    if not any(n.startswith("rank-") and n.endswith(".json") for n in names):
        raise NotAProfileFolder(folder, "not a profile folder (no rank-N.json)")
    return names


def pack(folder: str, target: IO[bytes]) -> int:
    """Write the gzip tar of ``folder``'s profile files to ``target``; its size in bytes."""
    with tarfile.open(fileobj=target, mode="w:gz") as archive:
        for name in profile_files(folder):
            archive.add(os.path.join(folder, name), arcname=name, recursive=False)
    size = target.tell()
    target.seek(0)
    return size


def send(url: str, run_id: str, body: IO[bytes], size: int, token: str) -> Outcome:
    """``PUT`` the packed run to the app at ``url``."""
    import urllib.error  # here: a job's exit path that only spools never pays for HTTP's imports
    import urllib.request

    target = f"{url.rstrip('/')}/api/runs/{urllib.parse.quote(run_id, safe='')}"
    request = urllib.request.Request(target, data=body, method="PUT", headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/gzip", "Content-Length": str(size)})
    try:
        with urllib.request.urlopen(request, timeout=SEND_TIMEOUT_S) as response:
            response.read(4096)
        return Outcome("delivered", f"uploaded as {run_id} ({size:,} bytes)")
    except urllib.error.HTTPError as exc:
        reason = f"{exc.code}: {_app_reason(exc)}"
        if exc.code == 409:
            return Outcome("exists", f"the app has a run {run_id} already ({reason})")
        if exc.code in RETRYABLE:
            return Outcome("unreachable", f"the app is unavailable ({reason})")
        return Outcome("refused", f"refused ({reason})")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        cause = getattr(exc, "reason", exc)
        text = getattr(cause, "strerror", None) or type(cause).__name__
        return Outcome("unreachable", f"cannot reach the app ({text})")


def _app_reason(exc) -> str:
    """The app's own ``error`` field, printable and short; never the reply as it came."""
    try:
        reason = json.loads(exc.read(8192)).get("error")
    except (ValueError, AttributeError, OSError):
        reason = None
    if not isinstance(reason, str):
        reason = str(exc.reason or "")
    return "".join(c if c.isprintable() else "?" for c in reason)[:200]


def upload_folder(url: str, folder: str, run_id: str, token: str) -> Outcome:
    """Pack ``folder`` (in a temporary file) and send it; ``NotAProfileFolder`` when it is not one."""
    with tempfile.TemporaryFile(prefix="otel-profiler-upload-") as body:
        size = pack(folder, body)
        return send(url, run_id, body, size, token)


# ------------------------------------------------------------------------------------ the spool
def spool_beside(folder: str) -> str:
    """The upload spool of the profile folder ``folder``: ``upload-spool`` beside it (for the default
    layout, ``OTEL_PROFILER_OUTPUT_DIR/upload-spool``; for a folder named with ``--output-dir`` or
    ``OTEL_PROFILER_PROFILE_DIR``, next to that folder, not in the working directory)."""
    return os.path.join(os.path.dirname(os.path.abspath(folder)), SPOOL_NAME)


def spool_problem(spool: str) -> str:
    """Why ``spool`` cannot be used ("it is a symbolic link of another user (uid 1001)", "it can be
    written by other users (mode 0777)": see ``make_private_dir``), or "" when it is usable or can be
    made."""
    try:
        check_private_dir(spool)
    except FileNotFoundError:
        return ""  # made at the first upload
    except UnsafeFolderError as exc:
        return f"it {exc.strerror}"
    except OSError as exc:
        return str(exc.strerror or exc)
    return ""


def spool_upload(spool: str, url: str, folder: str, run_id: str) -> Path | None:
    """Record a pending upload in ``spool`` (made 0700; an unsafe one raises ``OSError``); the
    record, or None when the spool is full. The same folder for the same app is recorded once."""
    make_private_dir(spool)
    folder = os.path.abspath(folder)
    records = pending(spool)
    for record in records:
        doc = _read(record)
        if doc and doc.get("folder") == folder and doc.get("url") == url:
            return record
    if len(records) >= MAX_PENDING:
        return None
    path = Path(spool) / f"{time.time_ns()}-{os.getpid()}-{run_id[:100]}.json"
    doc = {"url": url, "folder": folder, "run_id": run_id, "spooled_at": time.time(), "attempts": 0, "last": ""}
    with open_private(str(path), "x", encoding="utf-8") as f:
        json.dump(doc, f)
    return path


def pending(spool: str) -> list[Path]:
    """The records waiting in ``spool``, oldest first."""
    try:
        return sorted(p for p in Path(spool).iterdir() if p.suffix == ".json" and not p.is_symlink())
    except OSError:
        return []


def _read(record: Path) -> dict | None:
    try:
        doc = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    fields = ("url", "folder", "run_id")
    return doc if isinstance(doc, dict) and all(isinstance(doc.get(k), str) for k in fields) else None


def _rewrite(record: Path, doc: dict) -> None:
    tmp = record.with_suffix(".tmp")
    with open_private(str(tmp), "w", encoding="utf-8") as f:
        json.dump(doc, f)
    os.replace(tmp, record)


@dataclass(frozen=True)
class Attempt:
    record: Path
    folder: str
    run_id: str
    url: str
    outcome: Outcome


def deliver_pending(spool: str, token: str, url: str | None = None, retry_refused: bool = False) -> list[Attempt]:
    """Try each record of ``spool`` once (only those for ``url`` when given), oldest first. A record
    another process is sending is skipped. Delivered ones (or ones the app has, or whose folder is
    gone) are removed; a refused one is kept, marked, and retried only with ``retry_refused``. After
    an app that cannot be reached, its other records wait for the next round."""
    attempts: list[Attempt] = []
    down: set[str] = set()
    for record in pending(spool):
        try:
            fd = os.open(record, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # being sent by another process
            if os.fstat(fd).st_nlink == 0:
                continue  # delivered meanwhile
            doc = _read(record)
            if doc is None:
                continue
            if (url and doc["url"] != url) or doc["url"] in down or (doc.get("refused") and not retry_refused):
                continue
            outcome = _attempt(doc, token)
            attempts.append(Attempt(record, doc["folder"], doc["run_id"], doc["url"], outcome))
            if outcome.settled:
                record.unlink(missing_ok=True)
                continue
            if outcome.state == "unreachable":
                down.add(doc["url"])
            doc.update(attempts=int(doc.get("attempts") or 0) + 1, last=outcome.detail,
                       refused=outcome.state == "refused")
            _rewrite(record, doc)
        finally:
            os.close(fd)
    return attempts


def _attempt(doc: dict, token: str) -> Outcome:
    if not os.path.isdir(doc["folder"]):
        return Outcome("gone", f"{doc['folder']}: the folder is gone; nothing to upload")
    try:
        return upload_folder(doc["url"], doc["folder"], doc["run_id"], token)
    except NotAProfileFolder as exc:
        return Outcome("gone", str(exc))
    except OSError as exc:  # the temporary file (a full disk): try again later
        return Outcome("unreachable", f"cannot pack the folder ({exc.strerror or exc})")


def deliver_with_retries(spool: str, token: str, url: str, budget_s: float = RETRY_S) -> bool:
    """Deliver ``spool``'s records for ``url``, retrying an app that cannot be reached with backoff
    (1 s doubling, at most 60 s a wait) for ``budget_s``; whether none waits any more."""
    deadline = time.monotonic() + budget_s
    wait = FIRST_WAIT_S
    while True:
        attempts = deliver_pending(spool, token, url)
        if not any(a.outcome.state == "unreachable" for a in attempts):
            return not attempts or all(a.outcome.settled for a in attempts)
        if time.monotonic() + wait > deadline:
            return False
        time.sleep(wait)
        wait = min(wait * 2, MAX_WAIT_S)


def start_worker(spool: str, url: str, env: Mapping[str, str]) -> int | None:
    """Deliver ``spool``'s records for ``url`` in a detached process (its own session, nothing on
    the terminal) that retries for a bounded time; its pid, or None. The token travels in ``env``."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    child_env = {k: v for k, v in env.items() if k != "OTEL_PROFILER_ENABLED"}
    child_env["PYTHONPATH"] = root  # this package; no bootstrap runs there
    actions = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDONLY if fd == 0 else os.O_WRONLY, 0) for fd in (0, 1, 2)]
    try:
        return os.posix_spawn(sys.executable, [sys.executable, "-m", __name__, spool, url], child_env,
                              file_actions=actions, setsid=True)
    except OSError:
        return None


def main(argv: list[str]) -> int:
    """``python -m otel_profiler.shared.upload SPOOL URL`` (the detached process)."""
    try:
        os.nice(19)
    except OSError:
        pass
    token = os.environ.get(TOKEN_VARIABLE, "").strip()
    if len(argv) != 2 or not token:
        return 2
    try:
        return 0 if deliver_with_retries(argv[0], token, argv[1]) else 1
    except Exception:  # noqa: BLE001 - detached: nothing to tell; the records stay for --retry
        log.debug("the detached upload failed", exc_info=True)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
