"""Starting a fixer run: the shared move of step, progress and commands."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import structlog
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.engine import outbox, repoconfig
from bot.engine.read import findings_of
from bot.fixers.base import FixRequest
from bot.rules.model import COALESCING
from bot.runtime.context import Runtime
from storage import dependencies, jobs, prs, rounds
from storage.keys import PrKey, ProcessKey
from storage.models import PullRequest, utcnow
from storage.statements import on_postgres
from storage.statuses import JobKind

log = structlog.get_logger(__name__)

DEADLINE_MARGIN = timedelta(seconds=60)
RUNS_IN_A_JOB = ("command", "fake")
# A fix job retries what fails before its agent starts (a 5xx reading the PR, a clone that
# failed): those are not husks. Once the agent has run, its verdict is written at once.
FIX_ATTEMPTS = 4
# A progress-check that cannot decide (GitHub down) comes back with capped backoff for hours
# rather than ending: a round must never wait on a check that gave up.
PROGRESS_ATTEMPTS = 60


def fix_key(process_key: ProcessKey, round_no: int, attempt: int) -> str:
    return f"fix:{process_key}:{round_no}:{attempt}"


def progress_key(process_key: ProcessKey, round_no: int, attempt: int, why: str) -> str:
    return f"pc:{process_key}:{round_no}:{attempt}:{why}"


async def queue_progress(session: AsyncSession, pr_key: PrKey, process_key: ProcessKey, round_no: int, attempt: int,
                         why: str, **fields) -> bool:
    _, created = await jobs.enqueue_in(
        session, on_postgres(session), JobKind.PROGRESS_CHECK,
        progress_key(process_key, round_no, attempt, why), pr_key=pr_key, process_key=process_key,
        round_no=round_no, payload={"attempt": attempt}, max_attempts=PROGRESS_ATTEMPTS, **fields)
    return created


async def queue_fixer(session: AsyncSession, rt: Runtime, pr: PullRequest, round_no: int, attempt: int,
                      findings_text: str, instructions: Sequence[str], *, kind: str = "review",
                      base_branch: str | None = None) -> None:
    """In the caller's transaction: the fixer's job (or its comment) and the deadline check.

    Written with the dispatch itself, so a crash right after cannot leave a round that waits
    for a fixer nobody started; the deadline check runs even if the fixer's job dies with its
    worker, so a round ends as a husk at worst, never hangs.
    """
    timeout = timedelta(seconds=rt.config.fixer.timeout_seconds)
    fixer = rt.config.fixer.kind
    pk = prs.process_key_of(pr)
    if fixer in RUNS_IN_A_JOB:
        await jobs.enqueue_in(session, rt.db.is_postgres, JobKind.FIX, fix_key(pk, round_no, attempt),
                              pr_key=pr.pr_key, process_key=pk, round_no=round_no,
                              payload={"attempt": attempt}, max_attempts=FIX_ATTEMPTS)
    else:
        # An asking fixer (mention, author) is pure: its comment is rendered now and posted
        # by the outbox, once per dispatch.
        assert rt.fixer is not None, "an asking fixer is dispatched only where serve built one"
        verdict = await rt.fixer.run(FixRequest(
            pr_key=pr.pr_key, round_no=round_no, attempt=attempt, title=pr.title, description="",
            head_branch=pr.head_branch or "", entry_head=pr.last_round_head or "", clone_url="", token=None,
            findings=findings_of(findings_text) or (), instructions=tuple(instructions), pr_author=pr.author,
            kind=kind, base_branch=base_branch,
            prompt_append=repoconfig.current(rt, pr.repo).config.fixer.prompt_append))
        await outbox.comment(session, pr.pr_key, f"convergebot:fix:{pk}:{round_no}:{attempt}",
                             verdict.comment or "Please address the review findings.",
                             process_key=pk)
    await queue_progress(session, pr.pr_key, pk, round_no, attempt, "deadline",
                         run_at=utcnow() + timeout + DEADLINE_MARGIN)
    log.info("fixer.dispatched", pr_key=pr.pr_key, round=round_no, attempt=attempt, fixer=fixer,
             findings=len(json.loads(findings_text or "[]")))


async def new_attempt(session: AsyncSession, pr_key: PrKey, process_key: ProcessKey, round_no: int,
                      values: dict[str, Any]) -> int:
    """`rounds.next_attempt` (no expected attempt) of a round that exists: started, or read just
    before. Its one None, a round with no row, is a bug here, not a race."""
    attempt = await rounds.next_attempt(session, pr_key, process_key, round_no, values)
    if attempt is None:
        raise LookupError(f"round {round_no} of {pr_key} (run {process_key}) has no row")
    return attempt


async def wake_dependents(session: AsyncSession, pr_key: PrKey) -> None:
    """In the caller's transaction: `pr_key` merged, so the PRs waiting on it (a `Depends-on:`,
    an enrollment's, a stack's) take their next step now, not at the next poll."""
    for dependent in await dependencies.dependents(session, pr_key):
        await requeue(session, dependent, "dependency_merged")


async def requeue(session: AsyncSession, pr_key: PrKey, why: str, *, once: bool = False,
                  delay_seconds: float = 0.0) -> None:
    """In the caller's transaction: take the PR's next step now (or after `delay_seconds`) rather
    than at the next webhook or poll (it coalesces into a sync already queued for the PR, pulling
    that one forward). `once`: `why` names this request alone (a run, a comment, a job), so a
    retry of its caller asks no second time."""
    key = f"sync:{pr_key}:{why}" if once else f"sync:{pr_key}:{why}:{utcnow().isoformat()}"
    await jobs.enqueue_in(session, on_postgres(session), JobKind.SYNC, key, pr_key=pr_key,
                          delay_seconds=delay_seconds, same_as=COALESCING[JobKind.SYNC])
