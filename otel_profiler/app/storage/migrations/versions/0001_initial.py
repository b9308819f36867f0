"""The first schema: teams, users, API tokens, sign-in sessions, audit log, runs, settings."""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("teams",
                    sa.Column("id", sa.Integer, primary_key=True),
                    sa.Column("name", sa.String(100), nullable=False, unique=True),
                    sa.Column("created_at", sa.DateTime, nullable=False))
    op.create_table("users",
                    sa.Column("id", sa.Integer, primary_key=True),
                    sa.Column("name", sa.String(100), nullable=False, unique=True),
                    sa.Column("team_id", sa.Integer, sa.ForeignKey("teams.id"), nullable=False),
                    sa.Column("role", sa.String(10), nullable=False),
                    sa.Column("password_hash", sa.String(200)),
                    sa.Column("created_at", sa.DateTime, nullable=False))
    op.create_table("api_tokens",
                    sa.Column("id", sa.Integer, primary_key=True),
                    sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id", ondelete="CASCADE"),
                              nullable=False, index=True),
                    sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
                    sa.Column("created_at", sa.DateTime, nullable=False),
                    sa.Column("revoked_at", sa.DateTime))
    op.create_table("login_sessions",
                    sa.Column("id", sa.Integer, primary_key=True),
                    sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id", ondelete="CASCADE"),
                              nullable=False, index=True),
                    sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
                    sa.Column("created_at", sa.DateTime, nullable=False))
    op.create_table("audit_log",
                    sa.Column("id", sa.Integer, primary_key=True),
                    sa.Column("at", sa.DateTime, nullable=False, index=True),
                    sa.Column("actor", sa.String(100), nullable=False),
                    sa.Column("action", sa.String(40), nullable=False),
                    sa.Column("target", sa.String(100), nullable=False),
                    sa.Column("detail", sa.Text, nullable=False))
    op.create_table("runs",
                    sa.Column("run_id", sa.String(200), primary_key=True),
                    sa.Column("signature", sa.String(100), nullable=False),
                    sa.Column("status", sa.String(12), nullable=False),
                    sa.Column("reason", sa.Text, nullable=False),
                    sa.Column("team", sa.String(100)),
                    sa.Column("user", sa.String(100)),
                    sa.Column("host", sa.String(200)),
                    sa.Column("service", sa.String(200)),
                    sa.Column("start_ns", sa.BigInteger),
                    sa.Column("duration_s", sa.Float),
                    sa.Column("steps", sa.Integer),
                    sa.Column("gpus", sa.Integer),
                    sa.Column("ranks", sa.Integer),
                    sa.Column("top_insight", sa.Text, nullable=False))
    op.create_index("ix_runs_team_start", "runs", ["team", "start_ns"])
    op.create_index("ix_runs_user_start", "runs", ["user", "start_ns"])
    op.create_index("ix_runs_start", "runs", ["start_ns"])
    op.create_index("ix_runs_service", "runs", ["service"])
    op.create_table("settings",
                    sa.Column("name", sa.String(50), primary_key=True),
                    sa.Column("value", sa.Text, nullable=False))


def downgrade() -> None:
    for table in ("settings", "runs", "audit_log", "login_sessions", "api_tokens", "users", "teams"):
        op.drop_table(table)
