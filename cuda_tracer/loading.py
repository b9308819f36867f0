"""Turns what a user points the tools at into one ``Profile``: trace files, folders of per-rank trace
files, profile folders written by a live run, and TensorFlow profiles. The one place that knows every
input format, in one table (``READERS``): a new format is one entry, and the readers themselves depend
only on the profile types.

Several trace files (a folder of per-rank traces) can be read by several processes at once
(``workers``): as many as there are cores, files and room in memory for each one's parse.
"""

from __future__ import annotations

import glob
import logging
import os
import threading
from dataclasses import dataclass
from typing import Callable, Iterable

from cuda_tracer.jobs import check_one_job
from cuda_tracer.profile import Profile, RankProfile, TraceError
from cuda_tracer.profile_folder import is_profile_folder, read_profile_folder
from cuda_tracer.trace_json.files import is_trace_file, read_trace
from cuda_tracer.trace_input import read_problem, text_size
from cuda_tracer.tensorflow.xplane import XPLANE_SUFFIX, read_xplane, xplane_files

log = logging.getLogger("otel_profiler." + __name__)  # a child of the otel_profiler logger

PEAK_PER_TEXT_BYTE = 1  # a reader's peak memory per byte of JSON text (columns and a piece)

Progress = Callable[[int], None]


@dataclass(frozen=True)
class InputFormat:
    """One input format: how a file or a folder of it is recognised, and how it is read."""

    name: str  # as errors and the folder-without-traces message name it
    claims_file: Callable[[str], bool]
    files_in: Callable[[str], list[str]]  # its files in a folder ([] for none); the folder itself when whole
    read: Callable[[str, int | None, int, Progress | None], list[RankProfile | TraceError]]
    whole_folder: bool = False  # a folder is one input (its size is every file in it)
    in_processes: bool = False  # several of its files are read by processes at once


def _read_trace_json(path: str, max_text_bytes: int | None, piece_workers: int,
                     progress: Progress | None) -> list[RankProfile | TraceError]:
    return [read_trace(path, max_text_bytes, piece_workers, progress)]


def _read_tensorflow(path: str, max_text_bytes: int | None, piece_workers: int,
                     progress: Progress | None) -> list[RankProfile | TraceError]:
    return [read_xplane(path)]


def _read_profile_folder(path: str, max_text_bytes: int | None, piece_workers: int,
                         progress: Progress | None) -> list[RankProfile | TraceError]:
    return read_profile_folder(path)


def _never(path: str) -> bool:
    return False


def _profile_folder_itself(folder: str) -> list[str]:
    return [folder] if is_profile_folder(folder) else []


def _trace_json_files(folder: str) -> list[str]:
    return sorted(p for p in glob.glob(os.path.join(folder, "*")) if is_trace_file(p))


def _is_tensorflow_file(path: str) -> bool:
    return path.endswith(XPLANE_SUFFIX)


# Module-level functions only: a format travels to reader processes by reference.
PROFILE_FOLDER = InputFormat("profile folder", _never, _profile_folder_itself, _read_profile_folder,
                             whole_folder=True)
TRACE_JSON = InputFormat("trace", is_trace_file, _trace_json_files, _read_trace_json, in_processes=True)
TENSORFLOW = InputFormat("xplane", _is_tensorflow_file, xplane_files, _read_tensorflow)

READERS: tuple[InputFormat, ...] = (PROFILE_FOLDER, TRACE_JSON, TENSORFLOW)
"""Every input format, in the order a folder is tried; a file no entry claims is read as trace JSON."""
NO_INPUT = ("folder holds no trace files (*.json, *.json.gz), no TensorFlow profile (*.xplane.pb) "
            "and no otel-profiler profile")

Task = tuple[InputFormat, str]  # an input's format and its path


def _tasks(path: str) -> list[Task]:
    """What one named input is: its format and file (or folder) paths, in reading order."""
    if os.path.isdir(path):
        for form in READERS:
            files = form.files_in(path)
            if files:
                return [(form, f) for f in files]
        raise TraceError(path, NO_INPUT + _runs_inside(path))
    if not os.path.exists(path):
        raise TraceError(path, _missing(path))
    return [(next((form for form in READERS if form.claims_file(path)), TRACE_JSON), path)]


def _runs_inside(folder: str, limit: int = 1000) -> str:
    """For a folder of profile folders (an output folder of several runs): which to name, the newest
    first, or "" when it holds none (the first ``limit`` entries are looked at)."""
    try:
        with os.scandir(folder) as entries:
            subfolders = [e.path for _, e in zip(range(limit), entries) if e.is_dir(follow_symlinks=False)]
        runs = sorted((p for p in subfolders if PROFILE_FOLDER.files_in(p)), reverse=True)
    except (OSError, TraceError):  # an unreadable subfolder: the hint is left out, not the error
        return ""
    if not runs:
        return ""
    more = f" ({len(runs)} runs in it; the newest by name)" if len(runs) > 1 else ""
    return f"; it holds run folders: name one, e.g. {runs[0]}{more}"


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
    tasks = [task for path in paths for task in _tasks(path)]  # in input order
    profile = Profile()
    total = sum(_input_bytes(form, path) for form, path in tasks)
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


def _read_one(form: InputFormat, path: str, max_text_bytes: int | None, piece_workers: int = 1,
              progress: Progress | None = None) -> list[RankProfile | TraceError]:
    """The ranks of one input, each a ``RankProfile`` or the ``TraceError`` that refused it."""
    try:
        ranks = form.read(path, max_text_bytes, piece_workers, progress)
    except TraceError as exc:
        return [exc]
    if not form.whole_folder:
        for rank in ranks:
            if isinstance(rank, RankProfile):
                rank.meta["file"] = path
    if progress is not None and form is not TRACE_JSON:  # the JSON reader reports as it reads
        progress(_input_bytes(form, path))
    return ranks


def _read_all(tasks: list[Task], workers: int | None, max_text_bytes: int | None,
              progress: Progress | None) -> list[list[RankProfile | TraceError]]:
    n = _worker_count(tasks, workers)
    if n < 2:  # one file at a time; a large one's pieces by several processes only when asked (-j N):
        # on 2 busy cores the forked readers cost 25 % more CPU and did not win wall time
        piece_workers = 1 if workers is None else workers
        return [_read_one(form, path, max_text_bytes, piece_workers, progress) for form, path in tasks]
    import multiprocessing  # only here: a single file should not pay for their import
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    # fork: workers start in milliseconds with everything imported; only from a single-threaded
    # process (``_worker_count`` checks), where forking is safe.
    pool = ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("fork"))
    try:
        futures = [pool.submit(_read_one, form, path, max_text_bytes) for form, path in tasks]
        out = []
        for (form, path), future in zip(tasks, futures):  # the first error in input order wins
            try:
                out.append(future.result())
            except BrokenProcessPool:
                raise TraceError(path, "not read: a reader process was killed (out of memory?); "
                                       "read fewer trace files at once") from None
            if progress is not None:
                progress(_input_bytes(form, path))
        return out
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _input_bytes(form: InputFormat, path: str) -> int:
    """The size of an input's files (what progress counts)."""
    try:
        if form.whole_folder:
            return sum(e.stat().st_size for e in os.scandir(path) if e.is_file(follow_symlinks=False))
        return os.path.getsize(path) if os.path.isfile(path) else 0
    except OSError:
        return 0


def _worker_count(tasks: list[Task], workers: int | None) -> int:
    traces = [path for form, path in tasks if form.in_processes]
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
