"""Turns what a user points the tools at into one ``Profile``: trace files, folders of per-rank trace
files, profile folders written by a live run, and TensorFlow profiles. The one place that knows every
input format, so the readers themselves depend only on the profile types.

Several trace files (a folder of per-rank traces) can be read by several processes at once
(``workers``): as many as there are cores, files and room in memory for each one's parse.
"""

from __future__ import annotations

import glob
import logging
import os
import threading
from typing import Callable, Iterable

from .jobs import check_one_job
from .profile import Profile, RankProfile, TraceError
from .profile_folder import is_profile_folder, read_profile_folder
from .trace_files import is_trace_file, read_trace
from .trace_input import read_problem, text_size
from .xplane import XPLANE_SUFFIX, read_xplane, xplane_files

log = logging.getLogger("otel_profiler." + __name__)  # a child of the otel_profiler logger

PEAK_PER_TEXT_BYTE = 1  # a reader's peak memory per byte of JSON text (columns and a piece)


def load_profile(paths: Iterable[str], workers: int | None = 1, *, skip_bad: bool = False,
                 max_text_bytes: int | None = None, one_job: bool = False,
                 progress: Callable[[int, int], None] | None = None) -> Profile:
    """Load trace files, folders of trace files, profile folders and TensorFlow profiles (``.xplane.pb``,
    a run folder or a TF logdir) into one profile.

    ``workers``: processes reading trace files at once; None picks as many as the cores, the files
    and the available memory allow (the command line's choice). Raises ``TraceError`` naming the
    first unusable input, in input order; with ``skip_bad``, an unreadable rank file is listed in
    ``Profile.refused`` instead (a path that does not exist or a folder without traces still
    raises). ``max_text_bytes``: the most JSON text one gzip trace may decompress to
    (``trace_input.text_limit``). ``one_job``: raise ``TraceError`` when the ranks read are not
    the ranks of one job (``jobs.check_one_job``). ``progress(done, total)``: called with each count
    of input bytes read and the total to read.
    """
    tasks: list[tuple[str, str]] = []  # (what, path) in input order
    for path in paths:
        if os.path.isdir(path):
            if is_profile_folder(path):
                tasks.append(("profile folder", path))
                continue
            files = sorted(p for p in glob.glob(os.path.join(path, "*")) if is_trace_file(p))
            what = "trace"
            if not files:  # a TensorFlow profiler logdir or run folder
                files, what = xplane_files(path), "xplane"
            if not files:
                raise TraceError(path, "folder holds no trace files (*.json, *.json.gz), "
                                       "no TensorFlow profile (*.xplane.pb) and no otel-profiler profile")
            tasks.extend((what, f) for f in files)
        elif not os.path.exists(path):
            raise TraceError(path, _missing(path))
        else:
            tasks.append(("xplane" if path.endswith(XPLANE_SUFFIX) else "trace", path))
    profile = Profile()
    total = sum(_input_bytes(what, path) for what, path in tasks)
    report = (lambda n: progress(n, total)) if progress else None
    for (_, path), results in zip(tasks, _read_all(tasks, workers, max_text_bytes, report)):
        for result in results:
            if isinstance(result, TraceError):
                if not skip_bad:
                    raise result
                profile.refused.append(result)
            else:
                profile.ranks.append(result)
        profile.sources.append(path)
    _number_unranked(profile.ranks)
    if one_job:
        check_one_job(profile)
    return profile


def _missing(path: str) -> str:
    """Why ``path``, which ``os.path.exists`` says is not there, cannot be read: a symlink loop,
    a folder on the way that may not be searched, ... or simply no such file or folder."""
    try:
        os.stat(path)
    except FileNotFoundError:
        return "no such file or folder"
    except OSError as exc:
        return read_problem(exc)
    return "no such file or folder"


def _read_one(what: str, path: str, max_text_bytes: int | None, piece_workers: int = 1,
              progress: Callable[[int], None] | None = None) -> list[RankProfile | TraceError]:
    """The ranks of one input, each a ``RankProfile`` or the ``TraceError`` that refused it."""
    if what == "profile folder":
        ranks = read_profile_folder(path)
    else:
        try:
            if what == "xplane":
                rank = read_xplane(path)
            else:
                rank = read_trace(path, max_text_bytes, piece_workers, progress)
                progress = None  # reported as read
        except TraceError as exc:
            return [exc]
        rank.meta["file"] = path
        ranks = [rank]
    if progress is not None:
        progress(_input_bytes(what, path))
    return ranks


def _read_all(tasks: list[tuple[str, str]], workers: int | None, max_text_bytes: int | None,
              progress: Callable[[int], None] | None) -> list[list[RankProfile | TraceError]]:
    n = _worker_count(tasks, workers)
    if n < 2:  # one file at a time; a large one's pieces by several processes only when asked (-j N):
        # on 2 busy cores the forked readers cost 25 % more CPU and did not win wall time
        piece_workers = 1 if workers is None else workers
        return [_read_one(what, path, max_text_bytes, piece_workers, progress) for what, path in tasks]
    import multiprocessing  # only here: a single file should not pay for their import
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    # fork: workers start in milliseconds with everything imported; only from a single-threaded
    # process (``_worker_count`` checks), where forking is safe.
    pool = ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("fork"))
    try:
        futures = [pool.submit(_read_one, what, path, max_text_bytes) for what, path in tasks]
        out = []
        for (what, path), future in zip(tasks, futures):  # the first error in input order wins
            try:
                out.append(future.result())
            except BrokenProcessPool:
                raise TraceError(path, "not read: a reader process was killed (out of memory?); "
                                       "read fewer trace files at once") from None
            if progress is not None:
                progress(_input_bytes(what, path))
        return out
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _input_bytes(what: str, path: str) -> int:
    """The size of an input's files (what progress counts)."""
    try:
        if what == "profile folder":
            return sum(e.stat().st_size for e in os.scandir(path) if e.is_file(follow_symlinks=False))
        return os.path.getsize(path) if os.path.isfile(path) else 0
    except OSError:
        return 0


def _worker_count(tasks: list[tuple[str, str]], workers: int | None) -> int:
    traces = [path for what, path in tasks if what == "trace"]
    if len(traces) < 2 or workers == 1 or threading.active_count() > 1 or not hasattr(os, "fork"):
        return 1
    n = min(len(traces), workers or _cores())
    if workers is None:
        try:
            import psutil

            per_file = PEAK_PER_TEXT_BYTE * max(map(text_size, traces))
            n = min(n, max(1, psutil.virtual_memory().available // max(per_file, 1)))
        except Exception:
            log.debug("reading available memory failed; the worker count is not capped by it", exc_info=True)
    return n


def _cores() -> int:
    """Cores this process may run on (its affinity, as a container or taskset limits it)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _number_unranked(ranks: list[RankProfile]) -> None:
    """Ranks without ``distributedInfo`` get the next free number, so each rank stays distinct."""
    used = {r.rank for r in ranks if r.rank >= 0}
    nxt = 0
    for r in ranks:
        if r.rank < 0:
            while nxt in used:
                nxt += 1
            r.meta["rank"] = nxt
            used.add(nxt)
            if len(r.batch):
                r.batch.columns["rank"][:] = nxt
