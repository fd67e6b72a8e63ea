"""SQLModel tables. The migrations under migrations/ create exactly this schema."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar, cast

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Dialect,
    Index,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy import text as sql_text
from sqlmodel import AutoString, Field, SQLModel

from .keys import PrKey, ProcessKey, stored_pr_key

if TYPE_CHECKING:
    class _Table(SQLModel):
        """For the type checker only: SQLAlchemy gives each `table=True` model its `__table__`,
        which SQLModel does not declare. At run time the models derive from SQLModel itself."""

        __table__: ClassVar[Table]
else:
    class _Table(SQLModel):
        def __setattr__(self, name: str, value: Any) -> None:
            # A row made in code holds what it was given until it is read back: a PR key given
            # as text (a test's, a caller's) is parsed here, so a PR key column holds a `PrKey`
            # always. (SQLModel sets the attribute on its own after SQLAlchemy's events.)
            if name in _PR_KEY_COLUMNS and isinstance(value, str) and not isinstance(value, PrKey):
                value = stored_pr_key(value)
            super().__setattr__(name, value)


_PR_KEY_COLUMNS = frozenset({"pr_key", "depends_on_key"})  # the `PrKeyText` columns' names


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Stores naive UTC, returns aware UTC, so SQLite and PostgreSQL compare the same way."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else value.replace(tzinfo=UTC)


class PrKeyText(TypeDecorator[PrKey]):
    """A PR's key: stored as its text, read back as a `PrKey`."""

    impl = AutoString
    cache_ok = True

    def process_bind_param(self, value: PrKey | str | None, dialect: Dialect) -> str | None:
        return None if value is None else str(value)

    def process_result_value(self, value: str | None, dialect: Dialect) -> PrKey | None:
        return None if value is None else stored_pr_key(value)


def read_pr_keys(values: Iterable[str | None]) -> list[PrKey]:
    """The keys a select of one `PrKeyText` column read, NULLs left out. They are `PrKey`s
    already (the column reads them so); sqlmodel's `select` types one column's values by a
    type variable that stops at `str`, so the type is restated here, once."""
    return [cast(PrKey, v) for v in values if v is not None]


# Column helpers. `Any`, as sqlmodel's `Field` itself: the value stands for the column's Python
# type in the model's annotation (`created_at: datetime = ts(nullable=False)`).
def ts(nullable: bool = True, **kw: Any) -> Any:
    return Field(default=None, sa_column=Column(UTCDateTime(), nullable=nullable, **kw))


def big(nullable: bool = True) -> Any:
    return Field(default=None, sa_column=Column(BigInteger(), nullable=nullable))


def text(nullable: bool = True) -> Any:
    return Field(default=None, sa_column=Column(Text(), nullable=nullable))


class PullRequest(_Table, table=True):
    __tablename__ = "pull_requests"
    # A status, check or push delivery asks for a repository's active PRs at a head sha or
    # branch (`prs.active_at`), the repository compared in any case.
    __table_args__ = (Index("ix_pull_requests_status", "status"),
                      Index("ix_pull_requests_repo_head_sha", sql_text("lower(repo)"), "head_sha"),
                      Index("ix_pull_requests_repo_head_branch", sql_text("lower(repo)"), "head_branch"),
                      # A page of the list (`prs.page`): its order, and the working set's recent.
                      Index("ix_pull_requests_created_at", "created_at", "pr_key"),
                      Index("ix_pull_requests_updated_at", "updated_at"))

    pr_key: PrKey = Field(primary_key=True, sa_type=PrKeyText(300))
    repo: str = Field(max_length=250)
    number: int
    url: str = Field(max_length=500)
    title: str = Field(max_length=500)
    status: str = Field(max_length=32)
    current_round: int = 0
    process_key: ProcessKey | None = Field(default=None, sa_type=AutoString(length=64))
    waiting_since: datetime | None = ts()
    last_review_id: int | None = big()
    last_nudge_at: datetime | None = ts()
    last_round_head: str | None = Field(default=None, max_length=64)
    husk_retries: int = 0
    last_progress_job_key: str | None = Field(default=None, max_length=300)
    last_progress_result: str | None = text()
    max_rounds: int = 8
    converge_only: bool = False
    outcome: str | None = text()
    head_branch: str | None = Field(default=None, max_length=300)
    # The repository the head branch lives in: a fork's, for a PR from a fork.
    head_repo: str | None = Field(default=None, max_length=250)
    author: str | None = Field(default=None, max_length=100)
    converged_head: str | None = Field(default=None, max_length=64)
    merge_approved: bool = False
    # Since when GitHub has answered "unknown" to whether the PR can be merged (None: it said).
    mergeability_unknown_since: datetime | None = ts()
    # The merge stage's budgets (conflict and CI rounds, merge tries) count what came after this
    # (None: the whole run); a maintainer's answer to a merge-stage escalation moves it on.
    merge_budget_since: datetime | None = ts()
    # While the PR is in a merge queue: its merge group's commit, whose checks say why it left.
    merge_group: str | None = Field(default=None, max_length=64)
    submitted_by: str | None = Field(default=None, max_length=100)
    # Last read from GitHub (by a webhook-triggered sync or the poller).
    head_sha: str | None = Field(default=None, max_length=64)
    latest_review_id: int | None = big()
    gh_state: str | None = Field(default=None, max_length=16)
    synced_at: datetime | None = ts()
    check_run_id: int | None = big()
    check_run_head: str | None = Field(default=None, max_length=64)
    escalated_at: datetime | None = ts()
    last_action: str | None = text()
    created_at: datetime = ts(nullable=False)
    updated_at: datetime = ts(nullable=False)
    converged_at: datetime | None = ts()
    merged_at: datetime | None = ts()


class Run(_Table, table=True):
    __tablename__ = "runs"
    __table_args__ = (Index("ix_runs_pr_key", "pr_key"),
                      Index("ix_runs_ended_at", "ended_at", "process_key"))  # retention's walk

    process_key: ProcessKey = Field(primary_key=True, sa_type=AutoString(length=64))
    pr_key: PrKey = Field(sa_type=PrKeyText(300))
    kind: str = Field(max_length=16)
    state: str = Field(max_length=16)
    started_at: datetime = ts(nullable=False)
    ended_at: datetime | None = ts()
    reason: str | None = text()


class Round(_Table, table=True):
    __tablename__ = "rounds"
    __table_args__ = (UniqueConstraint("pr_key", "process_key", "round_no", name="uq_rounds_run_round"),)

    id: int | None = Field(default=None, primary_key=True)
    pr_key: PrKey = Field(sa_type=PrKeyText(300))
    process_key: ProcessKey = Field(sa_type=AutoString(length=64))
    round_no: int
    # What the round asks of the fixer: review (findings of a review), conflict (the base
    # branch brought in), ci (failing checks made to pass). storage.statuses.RoundKind.
    kind: str = Field(default="review", max_length=16, sa_column_kwargs={"server_default": "review"})
    status: str | None = Field(default=None, max_length=16)
    entry_head: str | None = Field(default=None, max_length=64)
    exit_head: str | None = Field(default=None, max_length=64)
    review_id: int | None = big()
    findings: str | None = text()
    summary: str | None = text()
    fixer: str | None = Field(default=None, max_length=32)
    attempt: int = Field(default=0, sa_column_kwargs={"server_default": "0"})
    fixer_started_at: datetime | None = ts()
    fixer_finished_at: datetime | None = ts()
    verdict: str | None = Field(default=None, max_length=16)
    question: str | None = text()
    instructions: str | None = text()
    # JSON: the findings its fixer fixed or declined (fingerprint, how, link), so a reviewer
    # repeating one in a later round of the run is answered from here, not fixed again.
    settled: str | None = text()
    started_at: datetime = ts(nullable=False)
    ended_at: datetime | None = ts()


class AgentAttempt(_Table, table=True):
    """One run of the fixer's agent: what it cost and how long it took, as its CLI reported it.
    Kept apart from the round row so an attempt whose verdict lost its fence (the run moved on
    while it worked) still counts against the budgets: its money was spent all the same."""

    __tablename__ = "agent_attempts"
    __table_args__ = (Index("ix_agent_attempts_pr_run", "pr_key", "process_key"),
                      Index("ix_agent_attempts_finished_at", "finished_at"))

    id: int | None = Field(default=None, primary_key=True)
    pr_key: PrKey = Field(sa_type=PrKeyText(300))
    process_key: ProcessKey = Field(sa_type=AutoString(length=64))
    round_no: int
    attempt: int
    fixer: str = Field(max_length=32)  # the preset's name, or the fixer's kind
    finished_at: datetime = ts(nullable=False)
    seconds: float
    input_tokens: int = 0
    output_tokens: int = 0
    turns: int | None = None
    cost_usd: float | None = None
    # What the agent's CLI said went wrong when it changed nothing (a failed edit, say).
    failure: str | None = text()


class Escalation(_Table, table=True):
    __tablename__ = "escalations"
    __table_args__ = (Index("ix_escalations_pr_status", "pr_key", "status"),
                      Index("ix_escalations_status", "status"))

    id: int | None = Field(default=None, primary_key=True)
    pr_key: PrKey = Field(sa_type=PrKeyText(300))
    process_key: ProcessKey = Field(sa_type=AutoString(length=64))
    round_no: int
    kind: str = Field(max_length=32)
    question: str = Field(sa_column=Column(Text(), nullable=False))
    fingerprint: str = Field(max_length=64)
    status: str = Field(max_length=16)
    answer: str | None = text()
    answered_by: str | None = Field(default=None, max_length=100)
    comment_id: int | None = big()
    asked_at: datetime = ts(nullable=False)
    answered_at: datetime | None = ts()


class Adjudication(_Table, table=True):
    __tablename__ = "adjudications"
    __table_args__ = (UniqueConstraint("pr_key", "fingerprint", name="uq_adjudications_pr_fp"),)

    id: int | None = Field(default=None, primary_key=True)
    pr_key: PrKey = Field(sa_type=PrKeyText(300))
    fingerprint: str = Field(max_length=64)
    answer: str = Field(sa_column=Column(Text(), nullable=False))
    adjudicated_by: str = Field(max_length=100)
    adjudicated_at: datetime = ts(nullable=False)
    invalidated_at: datetime | None = ts()


class Dependency(_Table, table=True):
    __tablename__ = "dependencies"
    __table_args__ = (Index("ix_dependencies_depends_on_key", "depends_on_key"),)  # who waits on a PR

    pr_key: PrKey = Field(primary_key=True, sa_type=PrKeyText(300))
    depends_on_key: PrKey = Field(primary_key=True, sa_type=PrKeyText(300))
    # Where the edge was given (storage/dependencies.py): a line of the body, re-read with it, an
    # enrollment's, kept, or a stack's (the PR's base branch is the other's head). An edge given
    # more than one way is a row each.
    source: str = Field(primary_key=True, max_length=16)
    # A stack edge only (docs/stacks.md): the parent's commit the child's own commits sit on, and
    # when the child was re-based onto the parent's base after the parent landed.
    fork_point: str | None = Field(default=None, max_length=64)
    restacked_at: datetime | None = ts()


class Job(_Table, table=True):
    __tablename__ = "jobs"
    __table_args__ = (
        Index("ix_jobs_status_run_at", "status", "run_at"),
        Index("ix_jobs_pr_key_kind_status", "pr_key", "kind", "status"),
        Index("ix_jobs_status_kind_run_at", "status", "kind", "run_at"),
    )

    id: int | None = Field(default=None, primary_key=True)
    kind: str = Field(max_length=64)
    pr_key: PrKey | None = Field(default=None, sa_type=PrKeyText(300))
    process_key: ProcessKey | None = Field(default=None, sa_type=AutoString(length=64))
    round_no: int | None = None
    key: str = Field(max_length=300, unique=True)
    payload: str = Field(default="{}", sa_column=Column(Text(), nullable=False))
    run_at: datetime = ts(nullable=False)
    attempts: int = 0
    max_attempts: int = 8
    status: str = Field(max_length=16)
    lease_owner: str | None = Field(default=None, max_length=100)
    lease_until: datetime | None = ts()
    started_at: datetime | None = ts()
    finished_at: datetime | None = ts()
    last_error: str | None = text()
    created_at: datetime = ts(nullable=False)


class WebhookDelivery(_Table, table=True):
    __tablename__ = "webhook_deliveries"
    __table_args__ = (Index("ix_webhook_deliveries_received_at", "received_at"),)  # the prune's

    delivery_id: str = Field(primary_key=True, max_length=100)
    event: str = Field(max_length=64)
    action: str | None = Field(default=None, max_length=64)
    received_at: datetime = ts(nullable=False)
    processed_at: datetime | None = ts()
    outcome: str | None = Field(default=None, max_length=32)
    error: str | None = text()


class Command(_Table, table=True):
    __tablename__ = "commands"
    __table_args__ = (Index("ix_commands_pr_key", "pr_key"),
                      Index("ix_commands_created_at", "created_at"))  # retention's delete

    id: int | None = Field(default=None, primary_key=True)
    comment_id: int = Field(sa_column=Column(BigInteger(), nullable=False, unique=True))
    pr_key: PrKey = Field(sa_type=PrKeyText(300))
    author: str = Field(max_length=100)
    verb: str = Field(max_length=32)
    args: str | None = text()
    accepted: bool
    why: str | None = text()
    created_at: datetime = ts(nullable=False)


class RepoWatchMark(_Table, table=True):
    """Per repository, the newest PR `updated_at` the poller has acted on (bot/intake/repowatch.py)."""

    __tablename__ = "repo_watch_marks"

    repo: str = Field(primary_key=True, max_length=250)
    mark: datetime = ts(nullable=False)
    updated_at: datetime = ts(nullable=False)


class Cursor(_Table, table=True):
    """A named position some periodic reader has reached (the webhook delivery log, a
    repository's comments), kept across restarts so a start resumes where the last one left."""

    __tablename__ = "cursors"

    name: str = Field(primary_key=True, max_length=300)
    value: str = Field(sa_column=Column(Text, nullable=False))
    updated_at: datetime = ts(nullable=False)

