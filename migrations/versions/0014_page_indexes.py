"""Indexes for a page of PRs (`prs.page`): the list's order (enrollment time, then key) and the
working set's "finished but changed lately" (`updated_at`), so the dashboard, the API and
`status` read one page of the history, never all of it.

Revision ID: 0014
Revises: 0013
"""

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_pull_requests_created_at", "pull_requests", ["created_at", "pr_key"])
    op.create_index("ix_pull_requests_updated_at", "pull_requests", ["updated_at"])


def downgrade() -> None:
    op.drop_index("ix_pull_requests_updated_at", table_name="pull_requests")
    op.drop_index("ix_pull_requests_created_at", table_name="pull_requests")
