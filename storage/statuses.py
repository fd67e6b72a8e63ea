"""PR statuses and the one place that decides whether a PR is finished."""

from __future__ import annotations

from enum import StrEnum

from .keys import ProcessKey


class Status(StrEnum):
    CONVERGING = "converging"
    WAITING_REVIEW = "waiting_review"
    ESCALATED = "escalated"
    WAITING_DEPS = "waiting_deps"
    WAITING_MERGE = "waiting_merge"
    MERGING = "merging"
    CONVERGED = "converged"
    MERGED = "merged"
    ABANDONED = "abandoned"


ACTIVE = frozenset(
    {
        Status.CONVERGING,
        Status.WAITING_REVIEW,
        Status.ESCALATED,
        Status.WAITING_DEPS,
        Status.WAITING_MERGE,
        Status.MERGING,
    }
)
TERMINAL = frozenset({Status.CONVERGED, Status.MERGED, Status.ABANDONED})


class RunState(StrEnum):
    ACTIVE = "active"
    COMPLETED = "completed"
    TERMINATED = "terminated"


class RoundKind(StrEnum):
    """What a round asks of the fixer (docs/architecture.md, "Merge stage")."""

    REVIEW = "review"  # address a review's findings
    CONFLICT = "conflict"  # bring the base branch in and resolve the conflicts
    CI = "ci"  # make the failing checks pass


class JobKind(StrEnum):
    """What a job does; its handler is the runtime's (bot/surfaces/serve.py, `job_handlers`)."""

    SYNC = "sync"  # a PR's step: read it, decide, record
    SYNC_REF = "sync_ref"  # a pushed ref: which PRs it moved
    FIX = "fix"  # run the fixer for a round attempt
    PROGRESS_CHECK = "progress_check"  # after the fixer (or its deadline): did the branch move?
    COMMAND = "command"  # a maintainer's `/converge` comment
    ENROLL = "enroll"  # a label, an auto-enroll author, a scan's find: submit the PR
    EFFECT = "effect"  # a GitHub write of the outbox


class SameWork(StrEnum):
    """What makes a new job the same work as one of its kind still queued, which then takes its
    place (run at the earlier of their two times) rather than queue a second: the queue's only
    coalescing. Which kinds coalesce, and by what, is the bot's to say (`bot/rules/model.py`)."""

    PR = "pr_key"  # the same PR
    PAYLOAD = "payload"  # the same payload


class RunKind(StrEnum):
    CONVERGENCE = "convergence"
    MERGE = "merge"


def derived_status(status: str, process_key: ProcessKey | None, run_state: str | None) -> str:
    """What every "is it finished?" check reads.

    A row whose run ended out of band (terminated by `abandon`, a crash clean-up, a lost race)
    reads `abandoned` even while its stored status is still active. A keyless active row (a
    crash between insert and key publish) keeps its stored status; `is_resubmittable` covers it.
    """
    if status in TERMINAL or process_key is None:
        return status
    if run_state != RunState.ACTIVE:
        return Status.ABANDONED
    return status


def is_resubmittable(status: str, process_key: ProcessKey | None, run_state: str | None) -> bool:
    if process_key is None:
        return True
    return derived_status(status, process_key, run_state) in TERMINAL
