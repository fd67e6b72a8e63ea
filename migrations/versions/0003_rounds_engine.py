"""Round engine state: fixer lifecycle on rounds, check run and escalation time on PRs.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

from storage.models import UTCDateTime

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rounds") as batch:
        batch.add_column(sa.Column("attempt", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("fixer_started_at", UTCDateTime(), nullable=True))
        batch.add_column(sa.Column("fixer_finished_at", UTCDateTime(), nullable=True))
        batch.add_column(sa.Column("verdict", sa.String(16), nullable=True))
        batch.add_column(sa.Column("question", sa.Text(), nullable=True))
        batch.add_column(sa.Column("instructions", sa.Text(), nullable=True))
    with op.batch_alter_table("pull_requests") as batch:
        batch.add_column(sa.Column("check_run_id", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("check_run_head", sa.String(64), nullable=True))
        batch.add_column(sa.Column("escalated_at", UTCDateTime(), nullable=True))
        batch.add_column(sa.Column("last_action", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("pull_requests") as batch:
        for column in ("last_action", "escalated_at", "check_run_head", "check_run_id"):
            batch.drop_column(column)
    with op.batch_alter_table("rounds") as batch:
        for column in ("instructions", "question", "verdict", "fixer_finished_at", "fixer_started_at", "attempt"):
            batch.drop_column(column)
