"""The runs table kept in step with the store (an incremental scan: only folders whose signature
changed are read again), and the landing page's query on it: filters, sort and paging in SQL, so a
page costs the same at 10,000 runs as at 10."""

from __future__ import annotations

import math
import re
import threading
from dataclasses import dataclass
from typing import Any, Callable
from datetime import datetime, timezone

from sqlalchemy import delete, func, or_, select
from sqlalchemy.orm import InstrumentedAttribute, Session, sessionmaker

from ..auth.accounts import Caller
from ..auth.access import visible_runs
from ..auth.models import Run
from .store import RunFacts, read_run, run_folders

SORTS: dict[str, InstrumentedAttribute[Any]] = {"start": Run.start_ns, "run_id": Run.run_id, "user": Run.user, "team": Run.team, "host": Run.host,
         "duration": Run.duration_s, "steps": Run.steps, "gpus": Run.gpus, "status": Run.status}
PAGE_SIZES = (25, 50, 100, 500)
BATCH = 500
WHOLE_NUMBER = re.compile(r"[+-]?[0-9]+")
MAX_PAGE = 10**12  # a page past the last is the last; this only keeps the number small


def refresh(db: Session, store: str) -> int:
    """Read the runs that are new or changed since the last scan, drop the ones gone; how many changed."""
    known = dict(db.execute(select(Run.run_id, Run.signature)).all())
    seen: set[str] = set()
    changed = 0
    for run_id, signature in run_folders(store):
        if known.get(run_id) == signature:
            seen.add(run_id)
            continue
        facts = read_run(store, run_id, signature)
        if facts is None:  # not (or no longer) a profile folder
            continue
        seen.add(run_id)
        _index(db, facts, run_id in known)
        changed += 1
        if changed % BATCH == 0:
            db.commit()
    gone = [run_id for run_id in known if run_id not in seen]
    for start in range(0, len(gone), BATCH):
        db.execute(delete(Run).where(Run.run_id.in_(gone[start:start + BATCH])))
    db.commit()
    return changed + len(gone)


def _index(db: Session, facts: RunFacts, known: bool) -> None:
    """Put one run in the index, in a savepoint of its own: a run the database refuses (a value it
    cannot hold) is indexed as unreadable with the reason, and every other run goes on."""
    try:
        with db.begin_nested():
            db.merge(_row(facts)) if known else db.add(_row(facts))
            db.flush()
    except Exception as exc:  # noqa: BLE001 - any database error is this one run's
        bad = RunFacts(run_id=facts.run_id, signature=facts.signature, status="corrupt",
                       reason=f"cannot be indexed ({type(exc).__name__})")
        with db.begin_nested():
            db.merge(_row(bad))
            db.flush()


def _row(facts: RunFacts) -> Run:
    return Run(run_id=facts.run_id, signature=facts.signature, status=facts.status, reason=facts.reason,
               team=facts.team, user=facts.user, host=facts.host, service=facts.service,
               start_ns=facts.start_ns, duration_s=facts.duration_s, steps=facts.steps, gpus=facts.gpus,
               ranks=facts.ranks, top_insight=facts.top_insight)


class Refresher:
    """Scans the store in a background thread every ``interval_s`` seconds (and once at start);
    ``before_scan`` first brings a remote store's mirror in step."""

    def __init__(self, sessions: sessionmaker[Session], store: str, interval_s: float,
                 before_scan: Callable[[], None] | None = None) -> None:
        self.sessions, self.store, self.interval_s = sessions, store, interval_s
        self.before_scan = before_scan
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="otel-profiler-store-scan", daemon=True)
        self.last_error = ""
        self._one_at_a_time = threading.Lock()

    def scan_now(self) -> None:
        """Scan now (after any scan under way: never two at once)."""
        with self._one_at_a_time:
            try:
                if self.before_scan is not None:
                    self.before_scan()
                with self.sessions() as db:
                    refresh(db, self.store)
                self.last_error = ""
            except Exception as exc:  # noqa: BLE001 - a failed scan is retried; pages keep the last index
                self.last_error = f"{type(exc).__name__}: {exc}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.scan_now()
            self._stop.wait(self.interval_s)


@dataclass
class RunQuery:
    """The landing page's (and ``/api/runs``') filters, sort and page."""

    user: str = ""
    team: str = ""
    service: str = ""
    text: str = ""
    since: str = ""  # YYYY-MM-DD, inclusive
    until: str = ""  # YYYY-MM-DD, inclusive
    status: str = ""
    sort: str = "start"
    descending: bool = True
    page: int = 1
    per_page: int = 50

    @classmethod
    def from_args(cls, args) -> "RunQuery":
        """From request arguments; a value out of range raises ValueError naming it."""
        def argument(name: str) -> str:
            return (args.get(name) or "").strip()[:200]

        q = cls(user=argument("user"), team=argument("team"), service=argument("service"), text=argument("text"),
                since=argument("since"), until=argument("until"), status=argument("status"))
        q.sort = args.get("sort") or "start"
        if q.sort not in SORTS:
            raise ValueError(f"sort: use one of {', '.join(SORTS)}")
        q.descending = (args.get("order") or "desc") != "asc"
        q.page = _page_number(args.get("page") or "1")
        per_page = (args.get("per_page") or "50").strip()
        if per_page not in map(str, PAGE_SIZES):
            raise ValueError(f"per_page: use one of {', '.join(map(str, PAGE_SIZES))}")
        q.per_page = int(per_page)
        for name in ("since", "until"):
            if getattr(q, name):
                _day_ns(getattr(q, name), name)
        return q


def _page_number(text: str) -> int:
    """A page number as asked for: a whole number of any size, brought to 1..``MAX_PAGE`` (past the
    last page, ``query_runs`` serves the last); ValueError for anything else."""
    text = text.strip()
    if not WHOLE_NUMBER.fullmatch(text):
        raise ValueError("page: a whole number (1 is the first page)")
    digits = text.lstrip("+-").lstrip("0")
    if text.startswith("-") or not digits:
        return 1
    return min(int(digits[:16]), MAX_PAGE)  # a longer number is past MAX_PAGE all the same


def _day_ns(day: str, name: str) -> int:
    try:
        return int(datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=timezone.utc).timestamp()) * 10**9
    except ValueError:
        raise ValueError(f"{name}: a date as YYYY-MM-DD") from None


def query_runs(db: Session, caller: Caller, q: RunQuery) -> tuple[list[Run], int]:
    """The page of runs ``caller`` may see that match ``q``, and how many match in all. A page past
    the last is the last: ``q.page`` is set to the page served."""
    where = [visible_runs(caller)]
    for column, value in ((Run.user, q.user), (Run.team, q.team), (Run.service, q.service), (Run.status, q.status)):
        if value:
            where.append(column == value)
    if q.since:
        where.append(Run.start_ns >= _day_ns(q.since, "since"))
    if q.until:
        where.append(Run.start_ns < _day_ns(q.until, "until") + 86400 * 10**9)
    if q.text:
        pattern = "%" + q.text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        where.append(or_(*(c.like(pattern, escape="\\") for c in (Run.run_id, Run.host, Run.service, Run.user,
                                                                   Run.top_insight, Run.reason))))
    total = db.scalar(select(func.count()).select_from(Run).where(*where)) or 0
    q.page = min(q.page, max(1, math.ceil(total / q.per_page)))
    column = SORTS[q.sort]
    order = (column.desc().nulls_last() if q.descending else column.asc().nulls_last(), Run.run_id)
    rows = db.scalars(select(Run).where(*where).order_by(*order)
                      .offset((q.page - 1) * q.per_page).limit(q.per_page)).all()
    return list(rows), total


def run_document(run: Run) -> dict:
    """A run as the API and the landing page describe it."""
    start = (datetime.fromtimestamp(run.start_ns / 1e9, timezone.utc).isoformat(timespec="seconds")
             if run.start_ns else None)
    return {"run_id": run.run_id, "team": run.team, "user": run.user, "host": run.host, "service": run.service,
            "start": start, "duration_s": run.duration_s, "steps": run.steps, "gpus": run.gpus, "ranks": run.ranks,
            "top_insight": run.top_insight, "status": run.status, "reason": run.reason}

