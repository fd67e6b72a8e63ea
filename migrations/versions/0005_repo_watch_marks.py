"""Repository watch marks: what the poller has seen of each repository's PR list, kept across
restarts so the first poll after a start re-reads only what changed.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

from storage.models import UTCDateTime

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "repo_watch_marks",
        sa.Column("repo", sa.String(250), primary_key=True),
        sa.Column("mark", UTCDateTime(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("repo_watch_marks")
