"""Plain data the rules decide over: a snapshot in, actions out; and the findings they hand the
fixer. No I/O here."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any

from bot.rules.reviewers import Reviewer, from_config
from storage.keys import PrKey
from storage.statuses import JobKind, SameWork

MAX_ROUNDS = 100  # the most rounds a run may be given, by the config, the CLI or the API
DEFAULT_MAX_ROUNDS = 8  # the rounds a run is given when nothing says otherwise
CHECK_RUN_NAME = "convergebot"  # the bot's own check run, left out of every reading of checks
FAILED_CONCLUSIONS = frozenset({"failure", "timed_out", "cancelled", "action_required", "startup_failure", "stale"})
def title_of(text: str | None) -> str | None:
    """A PR's title as shown, None when it says nothing (absent, or only whitespace): the caller
    falls back to what it has (the title stored, the PR's key)."""
    return text.strip() or None if text else None


# Which queued jobs are one piece of work, so that a new one joins the one queued (storage's
# queue runs it at the earlier time): a PR's syncs, since a sync re-reads the whole PR and a
# burst of webhooks (a review and its comments, a push and its checks) needs one read; the
# sync_refs of one repository and sha or branch, so a CI's statuses for one sha cost one.
COALESCING: Mapping[str, SameWork] = MappingProxyType({JobKind.SYNC: SameWork.PR, JobKind.SYNC_REF: SameWork.PAYLOAD})


@dataclass(frozen=True)
class Finding:
    thread_id: str | None  # GraphQL review thread node id (None for review-body items)
    comment_id: int | None  # id of the thread's first comment (None: GitHub sent none)
    path: str | None
    line: int | None
    body: str
    author: str | None
    fingerprint: str  # stable id of this finding's question (given by the engine)
    # Whether our reply was already on its thread when it was read (None: not known). Not
    # given to fixers: it only lets the reply effect skip re-reading the threads.
    answered: bool | None = None
    # critical | major | minor | nit: from the reviewer's own markers (bot/rules/severity.py).
    severity: str = "major"
    # Below `convergence.block_on`: handed to the fixer to take or leave, never holding a run back.
    optional: bool = False
    # The same finding raised by other reviewers on their own threads: (thread_id, author,
    # answered, fingerprint) each. The fixer reads it once; replies reach every one of these
    # threads too.
    twins: tuple[tuple[str, str | None, bool | None, str], ...] = ()
    # What each twin says, (thread_id, path, line, body): the fixer reads every member's own text
    # (two reviewers' near-duplicates may differ in what matters), not only this finding's.
    twin_texts: tuple[tuple[str, str | None, int | None, str], ...] = ()

    def __post_init__(self) -> None:
        # Read back from JSON, the twins are lists: keep the finding hashable and comparable.
        for name in ("twins", "twin_texts"):
            value = getattr(self, name)
            if value and not all(isinstance(t, tuple) for t in value):
                object.__setattr__(self, name, tuple(tuple(t) for t in value))


@dataclass(frozen=True)
class Review:
    id: int
    user: str
    state: str  # APPROVED | CHANGES_REQUESTED | COMMENTED | DISMISSED | PENDING
    commit_id: str | None
    submitted_at: datetime | None
    body: str = ""


@dataclass(frozen=True)
class Thread:
    id: str
    is_resolved: bool
    is_outdated: bool
    path: str | None
    line: int | None
    comment_id: int | None
    body: str
    author: str | None
    # Our reply is among its comments: True or False, None when the read did not show them all.
    replied: bool | None = False


@dataclass(frozen=True)
class Checks:
    """Required checks on the head: all green, still running, or some failed."""

    state: str  # success | pending | failure
    failing: tuple[str, ...] = ()
    pending: tuple[str, ...] = ()


@dataclass(frozen=True)
class Settings:
    reviewers: tuple[str, ...]
    review_wait_timeout: timedelta
    nudge_window: timedelta
    heal_grace: timedelta
    fixer_kind: str
    bot_login: str
    churn_rounds: int = 4
    max_husk_retries: int = 2
    # The least severe finding that still holds convergence back (`convergence.block_on`):
    # "nit", every finding blocks; "major", a run converges with only minor findings and nits left.
    block_on: str = "nit"
    # Each reviewer's kind, whether it is waited for and for how long (bot/rules/reviewers.py); empty:
    # every login in `reviewers`, as `reviewers = [...]` means.
    reviewer_specs: tuple[Reviewer, ...] = ()
    # How long a clean review waits for required checks that have not reported, from the round's
    # wait on the head (`[merge] checks_timeout_seconds`), before it asks a maintainer.
    checks_timeout: timedelta = timedelta(hours=1)

    @property
    def roster(self) -> tuple[Reviewer, ...]:
        return self.reviewer_specs or from_config(self.reviewers)


@dataclass(frozen=True)
class PrState:
    pr_key: PrKey
    status: str
    current_round: int
    max_rounds: int
    waiting_since: datetime | None
    last_review_id: int | None
    last_nudge_at: datetime | None
    last_round_head: str | None
    husk_retries: int
    escalated_at: datetime | None


@dataclass(frozen=True)
class Settled:
    """A finding settled in a round of this run: how (fixed, declined), on which thread, and the
    link a repeat of it is answered with (the commit that fixed it, the thread that declined it)."""

    fingerprint: str
    action: str  # fixed | declined
    round_no: int
    url: str
    thread_id: str | None = None
    reason: str = ""


@dataclass(frozen=True)
class RoundState:
    round_no: int
    entry_head: str | None
    review_id: int | None
    findings: tuple[Finding, ...] | None
    fixer_started_at: datetime | None
    fixer_finished_at: datetime | None
    verdict: str | None
    summary: str | None
    question: str | None
    status: str | None
    attempt: int = 0
    kind: str = "review"  # review | conflict | ci (storage.statuses.RoundKind)
    settled: tuple[Settled, ...] = ()  # findings its fixer fixed or declined


@dataclass(frozen=True)
class Adjudication:
    fingerprint: str
    answer: str
    by: str
    at: datetime


@dataclass(frozen=True)
class Snapshot:
    pr: PrState
    round: RoundState | None
    head: str | None  # from the branch ref; None if unreadable
    reviews: tuple[Review, ...]
    threads: tuple[Thread, ...] | None  # None: not read (no fresh review to evaluate)
    checks: Checks
    open_escalations: int
    adjudications: dict[str, Adjudication]
    now: datetime
    settings: Settings
    history: tuple[RoundState, ...] = ()
    # When our replies/resolves still queued in the outbox are next due (None: none are).
    replies_due: datetime | None = None
    # On a database restored from a backup, until the runs it held have moved on: when the
    # backup was taken. GitHub may hold reviews answering requests the database forgot.
    forgotten_since: datetime | None = None

    @property
    def threads_settling(self) -> bool:
        return self.replies_due is not None


# -- actions ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Action:
    pass


@dataclass(frozen=True)
class Wait(Action):
    reason: str


@dataclass(frozen=True)
class StartRound(Action):
    """Capture `entry_head` and wait for a fresh review of it (requesting one)."""

    entry_head: str
    reason: str
    review_baseline: int | None = None


@dataclass(frozen=True)
class Nudge(Action):
    """Re-request the review: at most once per nudge window."""


@dataclass(frozen=True)
class Converge(Action):
    """Converged: `optional` are the findings left below `block_on`, listed on the check run."""

    review_id: int
    head: str
    optional: tuple[Finding, ...] = ()


@dataclass(frozen=True)
class Fix(Action):
    """Hand `findings` to the fixer; `declines` are answered from memory and resolved."""

    review_id: int | None
    findings: tuple[Finding, ...]
    instructions: tuple[str, ...]
    declines: tuple[tuple[Finding, str], ...] = ()


@dataclass(frozen=True)
class Escalate(Action):
    kind: str
    question: str
    fingerprint: str | None = None


@dataclass(frozen=True)
class CheckProgress(Action):
    """An asked fixer (a cloud agent, the author) pushed: check progress now, not at the deadline."""

    attempt: int
    why: str = "push"


@dataclass(frozen=True)
class Heal(Action):
    """An escalated PR with nothing open (its answer write was lost): resume the round."""


@dataclass(frozen=True)
class Decision:
    actions: tuple[Action, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)


def known_fields(cls: type, stored: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of `stored` that the dataclass `cls` has: a row a newer release wrote (a field
    added to a finding, say) is read by an older one without the field, not refused. Through a
    rolling deploy two releases read each other's rows (docs/operations.md, "Upgrades")."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in stored.items() if k in names}
