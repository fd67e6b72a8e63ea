"""Each run of the fixer's agent with what it cost (tokens, dollars, seconds): the budgets per run
and per hour are read from it (docs/fixers.md, "Cost and time").

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

from storage.models import UTCDateTime

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "agent_attempts",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("pr_key", sa.String(300), nullable=False),
        sa.Column("process_key", sa.String(64), nullable=False),
        sa.Column("round_no", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("fixer", sa.String(32), nullable=False),
        sa.Column("finished_at", UTCDateTime(), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("input_tokens", sa.Integer(), nullable=False),
        sa.Column("output_tokens", sa.Integer(), nullable=False),
        sa.Column("turns", sa.Integer(), nullable=True),
        sa.Column("cost_usd", sa.Float(), nullable=True),
        sa.Column("failure", sa.Text(), nullable=True),
    )
    op.create_index("ix_agent_attempts_pr_run", "agent_attempts", ["pr_key", "process_key"])
    op.create_index("ix_agent_attempts_finished_at", "agent_attempts", ["finished_at"])


def downgrade() -> None:
    op.drop_index("ix_agent_attempts_finished_at", table_name="agent_attempts")
    op.drop_index("ix_agent_attempts_pr_run", table_name="agent_attempts")
    op.drop_table("agent_attempts")
