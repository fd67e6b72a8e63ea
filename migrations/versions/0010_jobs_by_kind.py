"""Jobs by kind: the fixer lane's look for its next due job walks only that kind's queued rows
instead of every queued job.

Revision ID: 0010
Revises: 0009
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_jobs_status_kind_run_at", "jobs", ["status", "kind", "run_at"])


def downgrade() -> None:
    op.drop_index("ix_jobs_status_kind_run_at", table_name="jobs")
