"""The merge stage's own rounds and waits: what a round asks of the fixer (a review's findings,
a conflict with the base, failing checks), since when GitHub has not said whether a PR can be
merged, the merge group of a PR in a merge queue, and since when the merge stage's budgets count (docs/architecture.md, "Merge stage").

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

from storage.models import UTCDateTime

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rounds") as batch:
        batch.add_column(sa.Column("kind", sa.String(16), nullable=False, server_default="review"))
    with op.batch_alter_table("pull_requests") as batch:
        batch.add_column(sa.Column("mergeability_unknown_since", UTCDateTime(), nullable=True))
        batch.add_column(sa.Column("merge_budget_since", UTCDateTime(), nullable=True))
        batch.add_column(sa.Column("merge_group", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("pull_requests") as batch:
        batch.drop_column("merge_group")
        batch.drop_column("merge_budget_since")
        batch.drop_column("mergeability_unknown_since")
    with op.batch_alter_table("rounds") as batch:
        batch.drop_column("kind")
