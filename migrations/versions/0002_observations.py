"""What the bot last read from GitHub for a PR: head, newest review, open/closed/merged.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

from storage.models import UTCDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("pull_requests") as batch:
        batch.add_column(sa.Column("head_sha", sa.String(64), nullable=True))
        batch.add_column(sa.Column("latest_review_id", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("gh_state", sa.String(16), nullable=True))
        batch.add_column(sa.Column("synced_at", UTCDateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("pull_requests") as batch:
        for column in ("synced_at", "gh_state", "latest_review_id", "head_sha"):
            batch.drop_column(column)
