"""Capture on demand across a running job: the ranks that report to the app while they run, and the
capture requests made for their run."""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("live_ranks",
                    sa.Column("run_id", sa.String(200), primary_key=True),
                    sa.Column("rank", sa.Integer, primary_key=True),
                    sa.Column("team", sa.String(100), nullable=False),
                    sa.Column("user", sa.String(100), nullable=False),
                    sa.Column("host", sa.String(200), nullable=False),
                    sa.Column("step", sa.Integer, nullable=False),
                    sa.Column("step_s", sa.Float),
                    sa.Column("poll_s", sa.Float, nullable=False),
                    sa.Column("seen_at", sa.DateTime, nullable=False, index=True))
    op.create_table("capture_requests",
                    sa.Column("id", sa.Integer, primary_key=True),
                    sa.Column("run_id", sa.String(200), nullable=False, index=True),
                    sa.Column("first_step", sa.Integer, nullable=False),
                    sa.Column("steps", sa.Integer, nullable=False),
                    sa.Column("requested_by", sa.String(100), nullable=False),
                    sa.Column("requested_at", sa.DateTime, nullable=False))


def downgrade() -> None:
    op.drop_table("capture_requests")
    op.drop_table("live_ranks")
