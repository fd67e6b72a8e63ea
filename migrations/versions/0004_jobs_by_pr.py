"""Jobs by PR: the index behind a PR's pending sync (coalescing) and its write budget count.

Revision ID: 0004
Revises: 0003
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_jobs_pr_key_kind_status", "jobs", ["pr_key", "kind", "status"])


def downgrade() -> None:
    op.drop_index("ix_jobs_pr_key_kind_status", table_name="jobs")
