"""Reading a profile store: which of its folders are runs, a cheap signature that changes when a run's
files do, and the facts the landing page lists (owner, team, host, start, duration, steps, GPUs, top
insight) read from each run's ``rank-N.json`` metadata and ``summary.json``. A run that cannot be read
is described as such, with its reason, never raised."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterator

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
        return os.stat(os.path.join(folder, name)).st_mtime_ns
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
        if has_summary:
            _read_summary(facts, _read_json(folder, "summary.json"))
        else:
            facts.status = "incomplete"
            facts.reason = "no summary.json yet (still running, or its summary is being written)"
    except ValueError as exc:
        return _corrupt(facts, str(exc))
    return facts


def _corrupt(facts: RunFacts, reason: str) -> RunFacts:
    facts.status, facts.reason = "corrupt", reason
    return facts


def _read_json(folder: str, name: str) -> dict[str, Any]:
    path = os.path.join(folder, name)
    try:
        if os.path.getsize(path) > MAX_JSON_BYTES:
            raise ValueError(f"{name}: larger than {MAX_JSON_BYTES >> 20} MiB")
        with open(path, "rb") as f:
            doc = json.loads(f.read())
    except OSError as exc:
        raise ValueError(f"{name}: cannot read ({exc.strerror or exc})") from None
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


def _read_summary(facts: RunFacts, summary: dict[str, Any]) -> None:
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


def read_summary(store: str, run_id: str) -> dict[str, Any]:
    """The run's ``summary.json`` document; ValueError naming the reason when there is none to read."""
    folder = os.path.join(store, run_id)
    if not os.path.exists(os.path.join(folder, "summary.json")):
        raise ValueError("no summary.json yet (still running, or its summary is being written)")
    return _read_json(folder, "summary.json")
