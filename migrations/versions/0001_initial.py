"""Initial schema: pull_requests, runs, rounds, escalations, adjudications, dependencies, jobs,
webhook_deliveries, commands.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

from storage.models import UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _ts(name: str, nullable: bool = True) -> sa.Column:
    return sa.Column(name, UTCDateTime(), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "pull_requests",
        sa.Column("pr_key", sa.String(300), primary_key=True),
        sa.Column("repo", sa.String(250), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("url", sa.String(500), nullable=False),
        sa.Column("title", sa.String(500), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("current_round", sa.Integer(), nullable=False),
        sa.Column("process_key", sa.String(64), nullable=True),
        _ts("waiting_since"),
        sa.Column("last_review_id", sa.BigInteger(), nullable=True),
        _ts("last_nudge_at"),
        sa.Column("last_round_head", sa.String(64), nullable=True),
        sa.Column("husk_retries", sa.Integer(), nullable=False),
        sa.Column("last_progress_job_key", sa.String(300), nullable=True),
        sa.Column("last_progress_result", sa.Text(), nullable=True),
        sa.Column("max_rounds", sa.Integer(), nullable=False),
        sa.Column("converge_only", sa.Boolean(), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=True),
        sa.Column("head_branch", sa.String(300), nullable=True),
        sa.Column("author", sa.String(100), nullable=True),
        sa.Column("converged_head", sa.String(64), nullable=True),
        sa.Column("merge_approved", sa.Boolean(), nullable=False),
        sa.Column("submitted_by", sa.String(100), nullable=True),
        _ts("created_at", nullable=False),
        _ts("updated_at", nullable=False),
        _ts("converged_at"),
        _ts("merged_at"),
    )
    op.create_index("ix_pull_requests_status", "pull_requests", ["status"])

    op.create_table(
        "runs",
        sa.Column("process_key", sa.String(64), primary_key=True),
        sa.Column("pr_key", sa.String(300), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        _ts("started_at", nullable=False),
        _ts("ended_at"),
        sa.Column("reason", sa.Text(), nullable=True),
    )
    op.create_index("ix_runs_pr_key", "runs", ["pr_key"])

    op.create_table(
        "rounds",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("pr_key", sa.String(300), nullable=False),
        sa.Column("process_key", sa.String(64), nullable=False),
        sa.Column("round_no", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=True),
        sa.Column("entry_head", sa.String(64), nullable=True),
        sa.Column("exit_head", sa.String(64), nullable=True),
        sa.Column("review_id", sa.BigInteger(), nullable=True),
        sa.Column("findings", sa.Text(), nullable=True),
        sa.Column("summary", sa.Text(), nullable=True),
        sa.Column("fixer", sa.String(32), nullable=True),
        _ts("started_at", nullable=False),
        _ts("ended_at"),
        sa.UniqueConstraint("pr_key", "process_key", "round_no", name="uq_rounds_run_round"),
    )

    op.create_table(
        "escalations",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("pr_key", sa.String(300), nullable=False),
        sa.Column("process_key", sa.String(64), nullable=False),
        sa.Column("round_no", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("question", sa.Text(), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("answer", sa.Text(), nullable=True),
        sa.Column("answered_by", sa.String(100), nullable=True),
        sa.Column("comment_id", sa.BigInteger(), nullable=True),
        _ts("asked_at", nullable=False),
        _ts("answered_at"),
    )
    op.create_index("ix_escalations_pr_status", "escalations", ["pr_key", "status"])

    op.create_table(
        "adjudications",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("pr_key", sa.String(300), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("answer", sa.Text(), nullable=False),
        sa.Column("adjudicated_by", sa.String(100), nullable=False),
        _ts("adjudicated_at", nullable=False),
        _ts("invalidated_at"),
        sa.UniqueConstraint("pr_key", "fingerprint", name="uq_adjudications_pr_fp"),
    )

    op.create_table(
        "dependencies",
        sa.Column("pr_key", sa.String(300), primary_key=True),
        sa.Column("depends_on_key", sa.String(300), primary_key=True),
    )

    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("pr_key", sa.String(300), nullable=True),
        sa.Column("process_key", sa.String(64), nullable=True),
        sa.Column("round_no", sa.Integer(), nullable=True),
        sa.Column("key", sa.String(300), nullable=False, unique=True),
        sa.Column("payload", sa.Text(), nullable=False),
        _ts("run_at", nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("lease_owner", sa.String(100), nullable=True),
        _ts("lease_until"),
        _ts("started_at"),
        _ts("finished_at"),
        sa.Column("last_error", sa.Text(), nullable=True),
        _ts("created_at", nullable=False),
    )
    op.create_index("ix_jobs_status_run_at", "jobs", ["status", "run_at"])

    op.create_table(
        "webhook_deliveries",
        sa.Column("delivery_id", sa.String(100), primary_key=True),
        sa.Column("event", sa.String(64), nullable=False),
        sa.Column("action", sa.String(64), nullable=True),
        _ts("received_at", nullable=False),
        _ts("processed_at"),
        sa.Column("outcome", sa.String(32), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
    )

    op.create_table(
        "commands",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("comment_id", sa.BigInteger(), nullable=False, unique=True),
        sa.Column("pr_key", sa.String(300), nullable=False),
        sa.Column("author", sa.String(100), nullable=False),
        sa.Column("verb", sa.String(32), nullable=False),
        sa.Column("args", sa.Text(), nullable=True),
        sa.Column("accepted", sa.Boolean(), nullable=False),
        sa.Column("why", sa.Text(), nullable=True),
        _ts("created_at", nullable=False),
    )


def downgrade() -> None:
    for table in (
        "commands",
        "webhook_deliveries",
        "jobs",
        "dependencies",
        "adjudications",
        "escalations",
        "rounds",
        "runs",
        "pull_requests",
    ):
        op.drop_table(table)
