"""Who sees which run: an admin sees every run; a member or viewer sees the runs whose ``ml.team``
resource attribute is their team (a run without a team is seen by admins only)."""

from __future__ import annotations

from sqlalchemy import true
from sqlalchemy.sql.elements import ColumnElement

from .accounts import Caller
from .models import Run


def visible_runs(caller: Caller) -> ColumnElement[bool]:
    """The WHERE clause of the runs ``caller`` may see."""
    return true() if caller.is_admin else Run.team == caller.team


def may_see(caller: Caller, run: Run) -> bool:
    return may_see_team(caller, run.team)


def may_see_team(caller: Caller, team: str | None) -> bool:
    """Whether ``caller`` may see a run whose ``ml.team`` is ``team`` (None: a run without a team)."""
    return caller.is_admin or (team is not None and team == caller.team)


def may_manage(caller: Caller) -> bool:
    """Only admins grant and remove access."""
    return caller.is_admin
