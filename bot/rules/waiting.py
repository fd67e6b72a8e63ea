"""Waiting on whom, since when, and until when: what an active PR waits on, read from its row and
its round in this one place, for every surface (status, the API, the metrics, the dashboard) and
the liveness watchdog."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from bot.rules.merge import (
    APPROVAL_WANTED,
    AWAITING_APPROVAL,
    CHECKS_RUNNING,
    CHECKS_UNREPORTED,
    checks_wait_began,
)
from storage.statuses import Status

# What a wait can be on: the `kind` of a `Waiting`, and the label of the oldest-wait gauge.
KINDS = ("reviewer", "check", "maintainer", "dependency", "merge_queue", "merge", "mergeability", "fixer", "bot")


class Row(Protocol):
    """What of a PR row the answer reads (storage.models.PullRequest has it)."""

    @property
    def waiting_since(self) -> datetime | None: ...
    @property
    def escalated_at(self) -> datetime | None: ...
    @property
    def converged_at(self) -> datetime | None: ...
    @property
    def merge_budget_since(self) -> datetime | None: ...
    @property
    def mergeability_unknown_since(self) -> datetime | None: ...
    @property
    def updated_at(self) -> datetime: ...
    @property
    def merge_group(self) -> str | None: ...
    @property
    def last_action(self) -> str | None: ...


class RoundRow(Protocol):
    """What of the PR's current round the answer reads (storage.models.Round has it)."""

    @property
    def started_at(self) -> datetime: ...
    @property
    def fixer_started_at(self) -> datetime | None: ...
    @property
    def status(self) -> str | None: ...
    @property
    def fixer(self) -> str | None: ...


@dataclass(frozen=True)
class Waiting:
    kind: str  # one of KINDS
    on: str  # who or what, as people read it: a login, a check's name, a PR key
    since: datetime | None
    # False where `since` is the row's `updated_at`, which moves with every write of the row
    # (any read recorded): a date the check run must not print, or each write would rewrite it.
    dated: bool = True

    @property
    def text(self) -> str:
        """`waiting_on` as the surfaces show it: the kind, and who where it is known."""
        return self.kind if self.on == self.kind else f"{self.kind}: {self.on}"


def _named(last_action: str | None, prefix: str) -> str | None:
    return last_action[len(prefix):] if last_action and last_action.startswith(prefix) else None


def waiting(status: str, pr: Row, rnd: RoundRow | None, unmerged_deps: Sequence[str] = (),
            reviewers: Sequence[str] = ()) -> Waiting | None:
    """What a PR in `status` (its derived status) waits on and since when; None once finished.

    `reviewers`: whom a review is asked of, where the caller knows (the row does not say).
    """
    # The merge stage's waits begin at the convergence, or at a maintainer's answer since.
    merge_wait = max((t for t in (pr.converged_at, pr.merge_budget_since) if t is not None), default=None)
    if status == Status.ESCALATED:
        return Waiting("maintainer", "a maintainer's answer", pr.escalated_at)
    if status == Status.WAITING_REVIEW:
        return Waiting("reviewer", ", ".join(reviewers) or "reviewer", pr.waiting_since)
    if status == Status.CONVERGING:
        if rnd is not None and rnd.fixer_started_at is not None and rnd.status is None:
            return Waiting("fixer", rnd.fixer or "fixer", rnd.fixer_started_at)
        return Waiting("bot", "bot", rnd.started_at if rnd is not None else pr.updated_at, dated=rnd is not None)
    if status == Status.WAITING_DEPS:
        return Waiting("dependency", ", ".join(unmerged_deps) or "dependency", merge_wait)
    if status == Status.WAITING_MERGE:
        if pr.merge_group:
            return Waiting("merge_queue", "merge_queue", merge_wait)
        if pr.mergeability_unknown_since is not None:
            return Waiting("mergeability", "mergeability", pr.mergeability_unknown_since)
        if pr.last_action == AWAITING_APPROVAL:
            return Waiting("maintainer", "/converge merge", merge_wait)
        if approvers := _named(pr.last_action, APPROVAL_WANTED):
            return Waiting("reviewer", f"an approving review from {approvers}", merge_wait)
        checks = _named(pr.last_action, CHECKS_RUNNING) or _named(pr.last_action, CHECKS_UNREPORTED)
        if checks:
            return Waiting("check", checks, checks_wait_began(pr.waiting_since, pr.merge_budget_since))
        return Waiting("merge", "merge", merge_wait)
    if status == Status.MERGING:
        return Waiting("merge", "merge", pr.updated_at, dated=False)
    return None


@dataclass(frozen=True)
class Limits:
    """How long the waits the bot ends by itself last at most: by then the PR's next step acts
    unasked (escalates, or finds the wait over). A fixer's wait has none here: its deadline
    check is a job, and a round with no job left to close it is the watchdog's first case."""

    review: timedelta  # `decide.review_wait_limit`
    checks: timedelta  # `[merge] checks_timeout_seconds`
    mergeability: timedelta  # `[merge] mergeability_timeout_seconds`


def ends_by(status: str, wait: Waiting, limits: Limits) -> datetime | None:
    """The date by which the bot itself ends `wait` of a PR in `status`, at the latest; None for
    a wait only others end (a maintainer, a dependency, GitHub's merge queue, the approval branch
    protection wants of a converged PR) or one whose start is not its own."""
    limits_of: dict[tuple[str, str], timedelta] = {
        (Status.WAITING_REVIEW, "reviewer"): limits.review, (Status.WAITING_MERGE, "check"): limits.checks,
        (Status.WAITING_MERGE, "mergeability"): limits.mergeability}
    limit = limits_of.get((status, wait.kind))
    if limit is None or wait.since is None or not wait.dated:
        return None
    return wait.since + limit
