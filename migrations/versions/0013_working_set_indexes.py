"""Indexes for the reads that must not scan the history: a delivery's active PRs at a head
(`prs.active_at`, the repository in any case), the deliveries' prune, open escalations, a PR's
commands, and who waits on a PR.

Revision ID: 0013
Revises: 0012
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_pull_requests_repo_head_sha", "pull_requests", [sa.text("lower(repo)"), "head_sha"])
    op.create_index("ix_pull_requests_repo_head_branch", "pull_requests", [sa.text("lower(repo)"), "head_branch"])
    op.create_index("ix_webhook_deliveries_received_at", "webhook_deliveries", ["received_at"])
    op.create_index("ix_escalations_status", "escalations", ["status"])
    op.create_index("ix_commands_pr_key", "commands", ["pr_key"])
    op.create_index("ix_dependencies_depends_on_key", "dependencies", ["depends_on_key"])


def downgrade() -> None:
    for table, name in (("dependencies", "ix_dependencies_depends_on_key"), ("commands", "ix_commands_pr_key"),
                        ("escalations", "ix_escalations_status"),
                        ("webhook_deliveries", "ix_webhook_deliveries_received_at"),
                        ("pull_requests", "ix_pull_requests_repo_head_branch"),
                        ("pull_requests", "ix_pull_requests_repo_head_sha")):
        op.drop_index(name, table_name=table)
