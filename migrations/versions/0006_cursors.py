"""Cursors: named positions of periodic readers (the App's webhook delivery log, repository
scans), kept across restarts.

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

from storage.models import UTCDateTime

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "cursors",
        sa.Column("name", sa.String(300), primary_key=True),
        sa.Column("value", sa.Text(), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("cursors")
