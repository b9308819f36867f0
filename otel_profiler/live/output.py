"""The embedded default output: one rank's parts and metadata in a profile folder, then the summary.

A profile folder (``OTEL_PROFILER_OUTPUT_DIR/<run id>/`` or ``OTEL_PROFILER_PROFILE_DIR``) is made
with user-only permissions and holds every rank's ``rank-<r>.<part>.events`` and ``rank-<r>.json``
(``cuda_tracer.profile.write_rank``). A process claims its rank with an exclusive lock file before it
writes its first part, so two live processes never write the same rank's files (the loser, e.g. a
spawned helper process, stays silent). A lock left by a dead process is taken over, and that
rank's old event files are removed: re-using a folder replaces the rank, never mixes two runs. ``write_summary`` reads the whole folder back and writes
``summary.json``.
"""

from __future__ import annotations

import json
import os
from typing import Any

from cuda_tracer.private_files import open_private
from cuda_tracer.events import EventBatch
from cuda_tracer.profile import PROFILE_EVENTS, PROFILE_META, RankProfile, write_rank
from cuda_tracer.loading import load_profile


class RankWriter:
    def __init__(self, folder: str, rank: int) -> None:
        self.folder = folder
        self.rank = rank
        self.parts = 0
        self.events = 0
        self._claimed: bool | None = None

    def claim(self) -> bool:
        """Make the folder and take this rank; False when another live process already holds it."""
        if self._claimed is None:
            os.makedirs(self.folder, mode=0o700, exist_ok=True)
            lock = os.path.join(self.folder, f"rank-{self.rank}.lock")
            self._claimed = _lock(lock) or (_holder_dead(lock) and _replace_lock(lock))
            if self._claimed:
                prefix = f"rank-{self.rank}."
                for name in os.listdir(self.folder):
                    if name.startswith(prefix) and name.endswith(".events"):
                        os.unlink(os.path.join(self.folder, name))
        return self._claimed

    def write(self, meta: dict[str, Any], batch: EventBatch) -> bool:
        """Write ``batch`` as the next part (and the current metadata). False when not written."""
        if not self.claim():
            return False
        meta = dict(meta, parts=self.parts + 1, events=self.events + len(batch))
        try:
            write_rank(self.folder, RankProfile(meta=meta, batch=batch), part=self.parts)
        except OSError:  # a full disk: leave no half-written temporary file behind
            for name in (PROFILE_EVENTS.format(rank=self.rank, part=self.parts),
                         PROFILE_META.format(rank=self.rank)):
                _remove(os.path.join(self.folder, name + ".tmp"))
            raise
        self.parts += 1
        self.events += len(batch)
        return True


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def _lock(path: str) -> bool:
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return False
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    return True


def _holder_dead(path: str) -> bool:
    try:
        with open(path) as f:
            pid = int(f.read().strip() or 0)
    except (OSError, ValueError):
        return True
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _replace_lock(path: str) -> bool:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    return _lock(path)


def summarize_folder(folder: str) -> dict[str, Any] | None:
    """The summary of the whole folder (every rank); None when it holds no events."""
    from ..analysis.summary import summarize

    try:
        profile = load_profile([folder])
    except ValueError:
        return None
    return summarize(profile)


def write_summary(folder: str) -> dict[str, Any] | None:
    """Summarize the whole folder (every rank) into ``summary.json``; None when it holds no events.
    An OSError (full disk) leaves no temporary file behind."""
    summary = summarize_folder(folder)
    if summary is None:
        return None
    tmp = os.path.join(folder, "summary.json.tmp")
    try:
        with open_private(tmp, "w") as f:
            json.dump(summary, f, indent=1, default=str)
        os.replace(tmp, os.path.join(folder, "summary.json"))
    except OSError:
        _remove(tmp)
        raise
    return summary
