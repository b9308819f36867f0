"""A run's HTML report, the same one ``otel-profiler report`` writes: built on first open by the
report renderer and cached in the app's folder, keyed by the run's signature (a changed run is built
again). One build per run at a time; the others wait for it."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Callable

from cuda_tracer.loading import load_profile
from cuda_tracer.profile import TraceError

from ...analysis.document import SummaryDocument
from ...analysis.insights import Thresholds
from ...report import renderers
from ...report.renderers import RenderOptions
from ..storage.store import unsafe_run


class ReportError(Exception):
    """The run's report cannot be built (the message names the reason)."""


class ReportCache:
    def __init__(self, store: str, cache_folder: Path, prepare: Callable[[str], None] | None = None) -> None:
        self.store = store
        self.prepare = prepare  # brings a run's files from a remote store before its first build
        self.folder = cache_folder
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def path(self, run_id: str, signature: str) -> Path:
        key = hashlib.sha256(signature.encode()).hexdigest()[:16]
        return self.folder / run_id / f"{key}.html"

    def report(self, run_id: str, signature: str) -> Path:
        """The cached report file of ``run_id`` (built now when missing); raises ``ReportError``."""
        target = self.path(run_id, signature)
        if target.exists():
            return target
        with self._guard:
            lock = self._locks.setdefault(run_id, threading.Lock())
        with lock:
            if not target.exists():
                self._build(run_id, target)
        return target

    def _build(self, run_id: str, target: Path) -> None:
        if self.prepare is not None:
            try:
                self.prepare(run_id)
            except Exception as exc:  # noqa: BLE001 - each filesystem raises its own errors
                raise ReportError(f"cannot copy the run's files from the store ({type(exc).__name__})") from None
        unsafe = unsafe_run(os.path.join(self.store, run_id))
        if unsafe is not None:
            raise ReportError(unsafe)
        try:
            profile = load_profile([os.path.join(self.store, run_id)], workers=1, skip_bad=True)
            if not profile.ranks:
                raise ReportError("no readable rank in the run folder")
            html = renderers.html(SummaryDocument(profile, Thresholds()), RenderOptions())
        except TraceError as exc:
            raise ReportError(str(exc)) from None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ReportError(f"{type(exc).__name__}: {exc}") from None
        target.parent.mkdir(mode=0o700, exist_ok=True)
        for old in target.parent.glob("*.html"):  # the report of an older state of the run
            old.unlink(missing_ok=True)
        tmp = target.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as f:
            f.write(html)
        os.replace(tmp, target)
