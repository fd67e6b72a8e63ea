"""Indexes for retention (storage/retention.py): runs in the order they ended (compaction walks
them from a cursor) and commands by age (their rows are deleted past `commands_days`).

Revision ID: 0015
Revises: 0014
"""

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_runs_ended_at", "runs", ["ended_at", "process_key"])
    op.create_index("ix_commands_created_at", "commands", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_commands_created_at", table_name="commands")
    op.drop_index("ix_runs_ended_at", table_name="runs")
