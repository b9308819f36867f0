"""Reading a profile store: which of its folders are runs, a cheap signature that changes when a run's
files do, and the facts the landing page lists (owner, team, host, start, duration, steps, GPUs, top
insight) read from each run's ``rank-N.json`` metadata and ``summary.json``. A run that cannot be read
is described as such, with its reason, never raised.

The store may be written by the jobs of several users, so the app trusts no file in it for more than
its run's owner could read: :func:`unsafe_file` is the one rule, applied to every file of a run before
anything of the run is read (the index here, the report in ``web.reports``): a regular file, not a
link, owned by the run folder's owner. A FIFO, a device, a symlink to a root-only file or a hard link
to another user's file makes the whole run unreadable, with that reason. Files are read with a size
limit (:func:`read_store_file`), never opened when they are not regular files."""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass, field
from typing import Any, Iterator, cast

from ...analysis.summary_schema import Summary
from .locations import APP_FOLDER

RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
"""A run id is its folder's name: letters, digits and ``._-`` (never ``..``, never a path)."""
NOT_RUNS = {APP_FOLDER, "otlp-spool", "upload-spool"}
RANK_META = re.compile(r"rank-(\d+)\.json")
MAX_JSON_BYTES = 64 << 20
SEVERITY_ORDER = {"high": 0, "medium": 1, "low": 2}


def valid_run_id(run_id: str) -> bool:
    return bool(RUN_ID_PATTERN.fullmatch(run_id or "")) and ".." not in run_id


@dataclass
class RunFacts:
    run_id: str
    signature: str
    status: str = "ok"  # ok, incomplete (no summary.json yet), corrupt
    reason: str = ""
    team: str | None = None
    user: str | None = None
    host: str | None = None
    service: str | None = None
    start_ns: int | None = None
    duration_s: float | None = None
    steps: int | None = None
    gpus: int | None = None
    ranks: int | None = None
    top_insight: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


INT64 = (-(1 << 63), (1 << 63) - 1)


def unsafe_file(folder: str, name: str, owner: int | None = None) -> str | None:
    """Why ``folder/name`` must not be read by the app (not a regular file, a link, or not the
    owner's), or None. ``owner``: the uid the file must have (the run folder's, by default)."""
    path = os.path.join(folder, name)
    try:
        info = os.lstat(path)
        if owner is None:
            owner = os.lstat(folder).st_uid
    except OSError as exc:
        return f"{name}: cannot read ({exc.strerror or exc})"
    if stat.S_ISLNK(info.st_mode):
        return f"{name}: a link (the app reads only the run's own files)"
    if not stat.S_ISREG(info.st_mode):
        return f"{name}: not a regular file"
    if info.st_uid != owner or info.st_nlink > 1:
        return f"{name}: not the run's own file (another owner, or a hard link)"
    return None


def unsafe_run(folder: str) -> str | None:
    """Why the run in ``folder`` must not be read (its first unsafe file), or None."""
    try:
        owner = os.lstat(folder).st_uid
        names = sorted(os.listdir(folder))
    except OSError as exc:
        return f"cannot list the folder ({exc.strerror or exc})"
    for name in names:
        if name.endswith((".lock", ".tmp")) or _plain_folder(os.path.join(folder, name)):
            continue  # never read by the app (a spool folder is not part of the profile)
        why = unsafe_file(folder, name, owner)
        if why is not None:
            return why
    return None


def _plain_folder(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def read_store_file(folder: str, name: str, limit: int) -> bytes:
    """The bytes of one of a run's files, at most ``limit``: opened without following a link and
    without blocking, read only when it is a regular file. ValueError naming the reason otherwise."""
    path = os.path.join(folder, name)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ValueError(f"{name}: cannot read ({exc.strerror or exc})") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{name}: not a regular file")
        if info.st_size > limit:
            raise ValueError(f"{name}: larger than {limit >> 20} MiB")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"{name}: larger than {limit >> 20} MiB")
    return data


def run_folders(store: str) -> Iterator[tuple[str, str]]:
    """(run id, signature) of every run folder directly under ``store``; the signature changes when
    files are added, removed or renamed, or when the metadata or summary is rewritten."""
    with os.scandir(store) as entries:
        for entry in entries:
            if entry.name in NOT_RUNS or not valid_run_id(entry.name):
                continue
            try:
                if not entry.is_dir(follow_symlinks=False):
                    continue
                folder_mtime = entry.stat(follow_symlinks=False).st_mtime_ns
            except OSError:
                continue
            yield entry.name, f"{folder_mtime}:{_mtime(entry.path, 'summary.json')}:{_mtime(entry.path, 'rank-0.json')}"


def _mtime(folder: str, name: str) -> int:
    try:
        return os.lstat(os.path.join(folder, name)).st_mtime_ns
    except OSError:
        return 0


def read_run(store: str, run_id: str, signature: str) -> RunFacts | None:
    """The facts of one run folder; None when the folder holds no profile files at all."""
    folder = os.path.join(store, run_id)
    facts = RunFacts(run_id=run_id, signature=signature)
    try:
        names = os.listdir(folder)
    except OSError as exc:
        return _corrupt(facts, f"cannot list the folder ({exc.strerror or exc})")
    metas = sorted((int(m.group(1)), name) for name in names if (m := RANK_META.fullmatch(name)))
    has_summary = "summary.json" in names
    if not metas and not has_summary:
        if any(name.startswith("rank-") for name in names):
            return _corrupt(facts, "event files without their rank-N.json metadata")
        return None
    facts.ranks = len(metas)
    try:
        if metas:
            _read_metadata(facts, [_read_json(folder, name) for _, name in metas])
        unsafe = unsafe_run(folder)  # after the metadata, whose own files are checked: the team sees it
        if unsafe is not None:
            return _corrupt(_storable(facts), unsafe)
        if has_summary:
            _read_summary(facts, _summary_file(folder))
        else:
            facts.status = "incomplete"
            facts.reason = "no summary.json yet (still running, or its summary is being written)"
    except ValueError as exc:
        return _corrupt(facts, str(exc))
    return _storable(facts)


def _storable(facts: RunFacts) -> RunFacts:
    """``facts`` as the index can hold them: a number out of a 64-bit integer's range or a text that
    is not valid Unicode (a lone surrogate) is dropped, and the run is listed as unreadable for it."""
    problems = []
    for name in ("start_ns", "steps", "gpus", "ranks"):
        value = getattr(facts, name)
        if isinstance(value, int) and not INT64[0] <= value <= INT64[1]:
            setattr(facts, name, None)
            problems.append(f"{name} out of range")
    if isinstance(facts.duration_s, float) and not -1e18 < facts.duration_s < 1e18:
        facts.duration_s = None
        problems.append("duration out of range")
    for name in ("team", "user", "host", "service", "top_insight"):
        value = getattr(facts, name)
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                setattr(facts, name, value.encode("utf-8", "backslashreplace").decode("utf-8"))
                problems.append(f"{name} is not valid text")
    if problems:
        facts.status = "corrupt"
        facts.reason = "; ".join(([facts.reason] if facts.reason else []) + problems)
    return facts


def _corrupt(facts: RunFacts, reason: str) -> RunFacts:
    facts.status, facts.reason = "corrupt", reason
    return facts


def _read_json(folder: str, name: str) -> dict[str, Any]:
    unsafe = unsafe_file(folder, name)
    if unsafe is not None:
        raise ValueError(unsafe)
    try:
        doc = json.loads(read_store_file(folder, name, MAX_JSON_BYTES))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{name}: not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{name}: not a JSON object")
    return doc


def _text(value: Any) -> str | None:
    return str(value)[:200] if value not in (None, "") else None


def _object(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def _read_metadata(facts: RunFacts, metas: list[dict[str, Any]]) -> None:
    first = metas[0]
    resource = _object(first.get("resource"))
    facts.team = _text(resource.get("ml.team"))
    facts.user = _text(resource.get("enduser.id"))
    facts.service = _text(resource.get("service.name"))
    facts.host = _text(first.get("host_name") or resource.get("host.name"))
    windows = [w for m in metas for w in (m.get("windows") or []) if isinstance(w, dict)]
    starts = [w["start_ns"] for w in windows if isinstance(w.get("start_ns"), int)]
    facts.start_ns = min(starts) if starts else None
    steps = [m["steps"] for m in metas if isinstance(m.get("steps"), int)]
    facts.steps = max(steps) if steps else None
    facts.gpus = sum(len(m.get("device_properties") or []) for m in metas)


def _summary_file(folder: str) -> Summary:
    """The run's ``summary.json``, a JSON object taken as the summary the run wrote (its keys are not
    checked here: readers look up what they need as a file may lack it)."""
    return cast(Summary, _read_json(folder, "summary.json"))


def _read_summary(facts: RunFacts, summary: Summary) -> None:
    window = _object(summary.get("window_us"))
    if isinstance(window.get("start_ns"), int):
        facts.start_ns = window["start_ns"]
    if isinstance(window.get("span_us"), (int, float)):
        facts.duration_s = window["span_us"] / 1e6
    steps = _object(summary.get("steps"))
    if isinstance(steps.get("count"), int):
        facts.steps = steps["count"]
    if isinstance(summary.get("devices"), dict):
        facts.gpus = len(summary["devices"])
    insights = [i for i in summary.get("insights") or [] if isinstance(i, dict) and i.get("title")]
    if insights:
        top = min(insights, key=lambda i: SEVERITY_ORDER.get(i.get("severity", ""), 9))
        facts.top_insight = f"[{top.get('severity', '?')}] {top['title']}"[:500]


def read_summary(store: str, run_id: str) -> Summary:
    """The run's ``summary.json`` document; ValueError naming the reason when there is none to read."""
    folder = os.path.join(store, run_id)
    if not os.path.lexists(os.path.join(folder, "summary.json")):
        raise ValueError("no summary.json yet (still running, or its summary is being written)")
    unsafe = unsafe_run(folder)
    if unsafe is not None:
        raise ValueError(unsafe)
    return _summary_file(folder)
