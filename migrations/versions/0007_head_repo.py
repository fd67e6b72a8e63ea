"""The repository a PR's head branch lives in (a fork's, for a PR from a fork), so the progress
check reads the branch where the fixer pushed it.

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("pull_requests") as batch:
        batch.add_column(sa.Column("head_repo", sa.String(250), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("pull_requests") as batch:
        batch.drop_column("head_repo")
