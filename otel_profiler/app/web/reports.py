"""A run's HTML report, the same one ``otel-profiler report`` writes: built on first open by the
report renderer and cached in the app's folder, keyed by the run's signature (a changed run is built
again). A run whose files cannot be read (every rank refused: damaged, or decompressing past its
bound) is remembered the same way: later opens answer its reason without reading it again. One
build per run at a time; the others wait for it."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Callable

from cuda_tracer.loading import load_profile
from cuda_tracer.model.bounded import run_allowance
from cuda_tracer.profile import TraceError

from ...analysis.document import SummaryDocument
from ...analysis.insights import Thresholds
from ...report import renderers
from ...report.renderers import RenderOptions
from ..storage.store import unsafe_run


UNREADABLE = ".unreadable"
"""Beside a run's report: why its files could not be read at that signature (answered again as is)."""


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
            refused = target.with_suffix(UNREADABLE)
            if refused.exists():  # remembered: never read (nor decompressed) again at this signature
                raise ReportError(refused.read_text(encoding="utf-8", errors="replace"))
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
            with run_allowance():  # one decompression bound for the whole run (``bounded``)
                profile = load_profile([os.path.join(self.store, run_id)], workers=1, skip_bad=True)
            html = renderers.HTML.text(SummaryDocument(profile, Thresholds()), RenderOptions()) if profile.ranks else ""
        except TraceError as exc:
            raise ReportError(str(exc)) from None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ReportError(f"{type(exc).__name__}: {exc}") from None
        if not profile.ranks:  # the run's files refuse to be read: remembered, not read again
            reason = "no readable rank in the run folder" + "".join(
                f" ({os.path.basename(e.path)}: {e.problem})" for e in profile.refused[:1])
            _write(target, target.with_suffix(UNREADABLE), reason)
            raise ReportError(reason)
        _write(target, target, html)


def _write(target: Path, path: Path, text: str) -> None:
    """Write ``path`` (the report ``target`` or its ``UNREADABLE`` record), private, in one rename,
    dropping what older states of the run left."""
    target.parent.mkdir(mode=0o700, exist_ok=True)
    for old in (*target.parent.glob("*.html"), *target.parent.glob(f"*{UNREADABLE}")):
        old.unlink(missing_ok=True)
    tmp = target.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as f:
        f.write(text)
    os.replace(tmp, path)
