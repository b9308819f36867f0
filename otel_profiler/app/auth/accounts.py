"""Teams, users and their roles, local passwords (argon2), API tokens and sign-in sessions (stored
hashed, revocable), and the audit log that records every grant and removal."""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, cast

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import delete, select, update
from sqlalchemy.engine import CursorResult
from sqlalchemy.orm import Session

from .models import ApiToken, AuditEntry, LoginSession, Team, User
from .roles import ROLES

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,99}")
"""User and team names: letters, digits and ``._@-``, at most 100 characters."""

_hasher = PasswordHasher()
_DUMMY_HASH = _hasher.hash("no such user")  # sign-in of an unknown name costs the same time


class AccountError(ValueError):
    """A request the accounts cannot carry out (the message says why, in one line)."""


@dataclass(frozen=True)
class Caller:
    """Who is asking: what the access rules need to know about a signed-in user or a token."""

    user_id: int
    name: str
    team: str
    role: str

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


def now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def check_name(kind: str, name: str) -> str:
    if not NAME_PATTERN.fullmatch(name or ""):
        raise AccountError(f"{kind} name {name!r}: use 1 to 100 letters, digits or ._@- (a letter or digit first)")
    return name


def audit(db: Session, actor: str, action: str, target: str, detail: str = "") -> None:
    db.add(AuditEntry(at=now(), actor=actor, action=action, target=target, detail=detail))


# ------------------------------------------------------------------------------------------ teams
def add_team(db: Session, name: str, actor: str) -> Team:
    check_name("team", name)
    if db.scalar(select(Team).where(Team.name == name)):
        raise AccountError(f"team {name!r} already exists")
    team = Team(name=name, created_at=now())
    db.add(team)
    audit(db, actor, "team.add", name)
    db.commit()
    return team


def remove_team(db: Session, name: str, actor: str) -> None:
    team = _team(db, name)
    members = db.scalars(select(User.name).where(User.team_id == team.id)).all()
    if members:
        raise AccountError(f"team {name!r} still has users ({', '.join(sorted(members))}): remove them first")
    db.delete(team)
    audit(db, actor, "team.remove", name)
    db.commit()


def list_teams(db: Session) -> list[tuple[str, int]]:
    """(team, number of users) for every team, by name."""
    teams = db.scalars(select(Team).order_by(Team.name)).all()
    counts: dict[int, int] = {}
    for team_id in db.scalars(select(User.team_id)):
        counts[team_id] = counts.get(team_id, 0) + 1
    return [(t.name, counts.get(t.id, 0)) for t in teams]


def _team(db: Session, name: str) -> Team:
    team = db.scalar(select(Team).where(Team.name == name))
    if team is None:
        raise AccountError(f"team {name!r} does not exist (add it with `otel-profiler teams add {name}`)")
    return team


# ------------------------------------------------------------------------------------------ users
def add_user(db: Session, name: str, team: str, role: str, password: str | None, actor: str) -> User:
    """Grant ``name`` access to ``team``'s runs at ``role`` (a password lets them sign in on the web)."""
    check_name("user", name)
    if role not in ROLES:
        raise AccountError(f"role {role!r}: use one of {', '.join(ROLES)}")
    if db.scalar(select(User).where(User.name == name)):
        raise AccountError(f"user {name!r} already exists (remove it first to change its team)")
    row = User(name=name, team_id=_team(db, team).id, role=role, created_at=now(),
               password_hash=_hasher.hash(password) if password else None)
    db.add(row)
    audit(db, actor, "user.grant", name, f"team={team} role={role}")
    db.commit()
    return row


def set_role(db: Session, name: str, role: str, actor: str) -> None:
    if role not in ROLES:
        raise AccountError(f"role {role!r}: use one of {', '.join(ROLES)}")
    user = _user(db, name)
    old, user.role = user.role, role
    audit(db, actor, "user.role", name, f"{old} -> {role}")
    db.commit()


def remove_user(db: Session, name: str, actor: str) -> None:
    """Remove ``name``: its sessions and tokens stop working with the same commit."""
    user = _user(db, name)
    db.execute(delete(LoginSession).where(LoginSession.user_id == user.id))
    db.execute(delete(ApiToken).where(ApiToken.user_id == user.id))
    db.delete(user)
    audit(db, actor, "user.remove", name)
    db.commit()


def list_users(db: Session) -> list[tuple[str, str, str, bool]]:
    """(user, team, role, has a password) for every user, by name."""
    rows = db.execute(select(User.name, Team.name, User.role, User.password_hash)
                      .join(Team, User.team_id == Team.id).order_by(User.name)).all()
    return [(u, t, r, bool(p)) for u, t, r, p in rows]


def _user(db: Session, name: str) -> User:
    user = db.scalar(select(User).where(User.name == name))
    if user is None:
        raise AccountError(f"user {name!r} does not exist")
    return user


def _caller(db: Session, user: User) -> Caller:
    return Caller(user.id, user.name, db.get_one(Team, user.team_id).name, user.role)


# ------------------------------------------------------------------------------------------ sign-in
def check_password(db: Session, name: str, password: str) -> Caller | None:
    """The user when ``password`` is theirs; None otherwise (unknown names take as long)."""
    user = db.scalar(select(User).where(User.name == name))
    try:
        if user is None or not user.password_hash:
            _hasher.verify(_DUMMY_HASH, password + "\0")
            return None
        _hasher.verify(user.password_hash, password)
    except (VerificationError, InvalidHashError):
        return None
    if _hasher.check_needs_rehash(user.password_hash):
        user.password_hash = _hasher.hash(password)
        db.commit()
    return _caller(db, user)


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def named_caller(db: Session, name: str) -> Caller | None:
    """The user a trusted single sign-on proxy names (only when that is configured); None when no such user."""
    user = db.scalar(select(User).where(User.name == name))
    return _caller(db, user) if user else None


def start_session(db: Session, caller: Caller) -> str:
    """A new sign-in session's key (kept by the browser in the signed session cookie)."""
    key = secrets.token_urlsafe(32)
    db.add(LoginSession(user_id=caller.user_id, key_hash=_digest(key), created_at=now()))
    db.commit()
    return key


def session_caller(db: Session, key: str | None) -> Caller | None:
    if not key:
        return None
    row = db.scalar(select(LoginSession).where(LoginSession.key_hash == _digest(key)))
    user = db.get(User, row.user_id) if row else None
    return _caller(db, user) if user else None


def end_session(db: Session, key: str | None) -> None:
    if key:
        db.execute(delete(LoginSession).where(LoginSession.key_hash == _digest(key)))
        db.commit()


# ------------------------------------------------------------------------------------------ tokens
TOKEN_PREFIX = "otp_"


def issue_token(db: Session, name: str, actor: str) -> str:
    """A new API token for ``name`` (only its hash is stored: this is the one time it is seen)."""
    user = _user(db, name)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    db.add(ApiToken(user_id=user.id, token_hash=_digest(token), created_at=now()))
    audit(db, actor, "token.issue", name)
    db.commit()
    return token


def revoke_tokens(db: Session, name: str, actor: str) -> int:
    """Revoke every live token of ``name``; how many were revoked."""
    user = _user(db, name)
    result = db.execute(update(ApiToken).where(ApiToken.user_id == user.id, ApiToken.revoked_at.is_(None))
                        .values(revoked_at=now()))
    count = cast("CursorResult[Any]", result).rowcount  # an UPDATE's result counts its rows
    audit(db, actor, "token.revoke", name, f"{count} token(s)")
    db.commit()
    return count


def token_caller(db: Session, token: str) -> Caller | None:
    row = db.scalar(select(ApiToken).where(ApiToken.token_hash == _digest(token), ApiToken.revoked_at.is_(None)))
    user = db.get(User, row.user_id) if row else None
    return _caller(db, user) if user else None


def audit_log(db: Session, limit: int = 200) -> list[AuditEntry]:
    return list(db.scalars(select(AuditEntry).order_by(AuditEntry.id.desc()).limit(limit)))
