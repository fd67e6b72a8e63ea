"""The findings a round's fixer fixed or declined, with where that happened: a finding repeated
in a later round of the run is answered from this record instead of being fixed again
(docs/architecture.md, "Findings: severity, carried over, grouped").

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rounds") as batch:
        batch.add_column(sa.Column("settled", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rounds") as batch:
        batch.drop_column("settled")
