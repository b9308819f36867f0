"""Capture on demand across a running job: its ranks report to the app while they run, and a member
of the run's team asks every rank to capture the same steps.

- A rank (its poll thread, ``live.remote_capture``) reports its step every few seconds with its API
  token (``RankReports.report``); the first report makes the run *live* for the token's team, and a
  token of another team cannot report under that run id. It gets back the capture requests it has
  not finished yet. Reports are held in memory and written to the database together at most once
  per ``WRITE_S`` (a thousand ranks every 5 s would otherwise be 200 commits a second); whatever
  reads the ranks writes the held reports first.
- A request (``request_capture``) picks a first step every rank will reach after hearing of it: the
  furthest step reported plus enough steps to cover two polls of the slowest-polling rank and two
  seconds at the fastest step time reported (at least ``MIN_LEAD_STEPS``), so the windows line up
  across ranks.
- A run none of whose ranks reported in ``LIVE_S`` is not running: a request for it is refused.

Who may do what follows the app's rules: members (and admins) report and request, a viewer may do
neither (403), and another team's run is not found (404). Every request goes to the audit log.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from ..auth.access import may_see_team
from ..auth.accounts import Caller, audit, now
from ..auth.models import CaptureRequest, LiveRank, Run

LIVE_S = 60.0
"""A rank that reported within this many seconds is running."""
MIN_LEAD_STEPS, NO_STEP_TIME_LEAD = 2, 100
MAX_STEPS = 1000
"""The most steps one request captures."""
MAX_RANK = 1 << 20
PENDING_SHOWN = 10
WRITE_S = 1.0
"""Held rank reports are written at most this long after they arrived."""
MAX_RUNS_KNOWN = 10_000


class CaptureError(Exception):
    """A report or request the app refuses: ``status`` (403, 404, 409, 400) and one line why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Capture:
    id: int
    first_step: int
    steps: int

    def as_json(self) -> dict[str, int]:
        return {"id": self.id, "first_step": self.first_step, "steps": self.steps}


def _may_see(caller: Caller, team: str | None, run_id: str) -> None:
    if not may_see_team(caller, team):
        raise CaptureError(404, f"no running job {run_id!r} that you may see")


def _may_act(caller: Caller, team: str | None, run_id: str) -> None:
    _may_see(caller, team, run_id)
    if caller.role == "viewer":
        raise CaptureError(403, "a viewer may not capture: ask a member of the team")


@dataclass
class _Report:
    team: str
    user: str
    host: str
    step: int
    step_s: float | None
    poll_s: float
    seen_at: datetime


class RankReports:
    """The ranks' reports of one app process, written to the database in batches (``WRITE_S``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[tuple[str, int], _Report] = {}
        self._teams: dict[str, str] = {}  # run id -> team, once known (a run keeps its team)
        self._written = time.monotonic()

    def report(self, db: Session, caller: Caller, run_id: str, rank: int, step: int, step_s: float | None,
               poll_s: float, host: str) -> list[Capture]:
        """Record that ``rank`` of ``run_id`` is at ``step``; the requests it has not finished."""
        if not (0 <= rank < MAX_RANK and step >= 0 and 0 < poll_s <= 3600):
            raise CaptureError(400, "rank, step and poll_s must be numbers in range")
        team = self._teams.get(run_id)
        if team is None:
            team = db.scalar(select(LiveRank.team).where(LiveRank.run_id == run_id).limit(1))
        _may_act(caller, caller.team if team is None else team, run_id)
        team = team or caller.team
        with self._lock:
            if len(self._teams) > MAX_RUNS_KNOWN:  # old runs are read from the database again
                self._teams.clear()
            self._teams.setdefault(run_id, team)
            self._held[(run_id, rank)] = _Report(team, caller.name, host[:200], step,
                                                 step_s if step_s is not None and 0 < step_s < 86400 else None,
                                                 poll_s, now())
            due = time.monotonic() - self._written >= WRITE_S
        if due:
            self.write(db)
        pending = db.scalars(select(CaptureRequest).where(CaptureRequest.run_id == run_id,
                                                          CaptureRequest.first_step + CaptureRequest.steps > step)
                             .order_by(CaptureRequest.id.desc()).limit(PENDING_SHOWN))
        return [Capture(r.id, r.first_step, r.steps) for r in reversed(list(pending))]

    def write(self, db: Session) -> None:
        """Write the held reports (one transaction)."""
        with self._lock:
            held, self._held = self._held, {}
            self._written = time.monotonic()
        if not held:
            return
        for (run_id, rank), r in held.items():
            row = db.get(LiveRank, (run_id, rank))
            if row is None:
                db.add(LiveRank(run_id=run_id, rank=rank, team=r.team, user=r.user, host=r.host, step=r.step,
                                step_s=r.step_s, poll_s=r.poll_s, seen_at=r.seen_at))
            else:
                row.host, row.step, row.step_s, row.poll_s, row.seen_at = r.host, r.step, r.step_s, r.poll_s, r.seen_at
        db.commit()


def request_capture(db: Session, caller: Caller, run_id: str, steps: int, reports: RankReports) -> Capture:
    """Ask every rank of the running job ``run_id`` to capture ``steps`` steps from a step ahead."""
    if not 1 <= steps <= MAX_STEPS:
        raise CaptureError(400, f"steps must be 1 to {MAX_STEPS}")
    reports.write(db)
    ranks = list(db.scalars(select(LiveRank).where(LiveRank.run_id == run_id)))
    _may_act(caller, ranks[0].team if ranks else None, run_id)
    if db.get(Run, run_id) is not None:
        raise CaptureError(409, f"run {run_id!r} has finished: its profile is in the app")
    cutoff = now() - timedelta(seconds=LIVE_S)
    live = [r for r in ranks if r.seen_at >= cutoff]
    if not live:
        last = max(r.seen_at for r in ranks)
        raise CaptureError(409, f"run {run_id!r} is not running: its ranks last reported "
                                f"{(now() - last).total_seconds():.0f} s ago")
    first = max(r.step for r in live) + lead_steps(live)
    capture = CaptureRequest(run_id=run_id, first_step=first, steps=steps, requested_by=caller.name,
                             requested_at=now())
    db.add(capture)
    audit(db, caller.name, "capture.request", run_id, f"steps {first}-{first + steps - 1} on {len(live)} rank(s)")
    db.commit()
    return Capture(capture.id, first, steps)


def lead_steps(live: list[LiveRank]) -> int:
    """How far ahead of the furthest rank a capture starts: two polls of the slowest-polling rank
    and two seconds (a report may wait ``WRITE_S`` to be written), at the fastest step time any rank
    reported."""
    times = [r.step_s for r in live if r.step_s]
    if not times:
        return NO_STEP_TIME_LEAD
    seconds = 2 * max(r.poll_s for r in live) + 1.0 + WRITE_S
    return max(MIN_LEAD_STEPS, math.ceil(seconds / min(times)))


@dataclass(frozen=True)
class LiveRun:
    """A running job as its page and the landing page show it."""

    run_id: str
    team: str
    ranks: list[LiveRank]
    captures: list[CaptureRequest]

    @property
    def step(self) -> int:
        return max((r.step for r in self.ranks), default=0)

    @property
    def seen_s(self) -> float:
        """Seconds since the latest report of any rank."""
        latest = max((r.seen_at for r in self.ranks), default=now())
        return (now() - latest).total_seconds()

    @property
    def running(self) -> bool:
        return self.seen_s <= LIVE_S


def live_run(db: Session, caller: Caller, run_id: str, reports: RankReports) -> LiveRun:
    """``run_id`` as its ranks reported it; ``CaptureError`` 404 unless ``caller`` may see it."""
    reports.write(db)
    ranks = list(db.scalars(select(LiveRank).where(LiveRank.run_id == run_id).order_by(LiveRank.rank)))
    _may_see(caller, ranks[0].team if ranks else None, run_id)
    requests = list(db.scalars(select(CaptureRequest).where(CaptureRequest.run_id == run_id)
                               .order_by(CaptureRequest.id.desc()).limit(50)))
    return LiveRun(run_id, ranks[0].team, ranks, requests)


def running_runs(db: Session, caller: Caller, reports: RankReports, limit: int = 50) -> list[tuple[str, str, int, int]]:
    """``(run_id, team, ranks, furthest step)`` of the jobs running now that ``caller`` may see."""
    reports.write(db)
    query = (select(LiveRank.run_id, LiveRank.team, func.count(), func.max(LiveRank.step))
             .where(LiveRank.seen_at >= now() - timedelta(seconds=LIVE_S))
             .group_by(LiveRank.run_id, LiveRank.team).order_by(LiveRank.run_id).limit(limit))
    if not caller.is_admin:
        query = query.where(LiveRank.team == caller.team)
    return [(run_id, team, int(count), int(step)) for run_id, team, count, step in db.execute(query)]
