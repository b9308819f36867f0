"""The app's tables (SQLAlchemy): teams, users, API tokens, sign-in sessions, the audit log, the
index of runs, the ranks of running jobs and their capture requests, and the app's own settings. The schema itself is made by the migrations
(``storage/migrations/versions``), never by ``create_all``."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, DateTime, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class Team(Base):
    __tablename__ = "teams"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime)


class User(Base):
    __tablename__ = "users"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    team_id: Mapped[int] = mapped_column(ForeignKey("teams.id"))
    role: Mapped[str] = mapped_column(String(10))
    password_hash: Mapped[str | None] = mapped_column(String(200), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime)


class ApiToken(Base):
    __tablename__ = "api_tokens"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)


class LoginSession(Base):
    __tablename__ = "login_sessions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime)


class AuditEntry(Base):
    __tablename__ = "audit_log"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(DateTime, index=True)
    actor: Mapped[str] = mapped_column(String(100))
    action: Mapped[str] = mapped_column(String(40))
    target: Mapped[str] = mapped_column(String(100))
    detail: Mapped[str] = mapped_column(Text, default="")


class Run(Base):
    __tablename__ = "runs"
    run_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    signature: Mapped[str] = mapped_column(String(100))
    status: Mapped[str] = mapped_column(String(12))  # ok, incomplete, corrupt
    reason: Mapped[str] = mapped_column(Text, default="")
    team: Mapped[str | None] = mapped_column(String(100), nullable=True)
    user: Mapped[str | None] = mapped_column(String(100), nullable=True)
    host: Mapped[str | None] = mapped_column(String(200), nullable=True)
    service: Mapped[str | None] = mapped_column(String(200), nullable=True)
    start_ns: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    duration_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    steps: Mapped[int | None] = mapped_column(Integer, nullable=True)
    gpus: Mapped[int | None] = mapped_column(Integer, nullable=True)
    ranks: Mapped[int | None] = mapped_column(Integer, nullable=True)
    top_insight: Mapped[str] = mapped_column(Text, default="")

    __table_args__ = (
        Index("ix_runs_team_start", "team", "start_ns"),
        Index("ix_runs_user_start", "user", "start_ns"),
        Index("ix_runs_start", "start_ns"),
        Index("ix_runs_service", "service"),
    )


class LiveRank(Base):
    """A rank of a running job, as it last reported (``storage.live_capture``)."""

    __tablename__ = "live_ranks"
    run_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    rank: Mapped[int] = mapped_column(Integer, primary_key=True)
    team: Mapped[str] = mapped_column(String(100))  # the reporting token's team: the run's
    user: Mapped[str] = mapped_column(String(100))
    host: Mapped[str] = mapped_column(String(200))
    step: Mapped[int] = mapped_column(Integer)
    step_s: Mapped[float | None] = mapped_column(Float, nullable=True)  # its recent step time
    poll_s: Mapped[float] = mapped_column(Float)  # how often it reports
    seen_at: Mapped[datetime] = mapped_column(DateTime, index=True)


class CaptureRequest(Base):
    """Capture ``steps`` steps from ``first_step`` on every rank of a running job."""

    __tablename__ = "capture_requests"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[str] = mapped_column(String(200), index=True)
    first_step: Mapped[int] = mapped_column(Integer)
    steps: Mapped[int] = mapped_column(Integer)
    requested_by: Mapped[str] = mapped_column(String(100))
    requested_at: Mapped[datetime] = mapped_column(DateTime)


class Setting(Base):
    __tablename__ = "settings"
    name: Mapped[str] = mapped_column(String(50), primary_key=True)
    value: Mapped[str] = mapped_column(Text)
