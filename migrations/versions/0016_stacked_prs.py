"""Stacked PRs (docs/stacks.md): a `stack` dependency (the PR's base branch is another PR's head
branch) keeps where the child's own commits begin (`fork_point`, the parent's commit they sit
on) and when the child was re-based after its parent landed (`restacked_at`). Both nullable: an
older release reads and writes the table as before (every row it knows has neither).

Revision ID: 0016
Revises: 0015
"""

import sqlalchemy as sa
from alembic import op

from storage.models import UTCDateTime

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("dependencies") as batch:
        batch.add_column(sa.Column("fork_point", sa.String(64), nullable=True))
        batch.add_column(sa.Column("restacked_at", UTCDateTime(), nullable=True))


def downgrade() -> None:
    # A stack edge stays a dependency an older release waits on; what it forgets is where the
    # child's commits begin, which the re-base reads again from GitHub.
    with op.batch_alter_table("dependencies") as batch:
        batch.drop_column("restacked_at")
        batch.drop_column("fork_point")
