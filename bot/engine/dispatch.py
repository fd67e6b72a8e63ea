"""Starting a fixer run and asking for reviews: the shared moves of step, progress and commands."""

from __future__ import annotations

import json
from datetime import timedelta

import structlog
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.prkey import parse_pr_key
from bot.runtime import Runtime
from storage import jobs
from storage.models import PullRequest, utcnow

log = structlog.get_logger(__name__)

DEADLINE_MARGIN = timedelta(seconds=60)
RUNS_IN_A_JOB = ("command", "fake")


def progress_key(process_key: str, round_no: int, attempt: int, why: str) -> str:
    return f"pc:{process_key}:{round_no}:{attempt}:{why}"


async def request_review(rt: Runtime, pr_key: str) -> None:
    key = parse_pr_key(pr_key)
    requested = await rt.github.request_review(
        key.owner, key.repo, key.number, list(rt.config.convergence.reviewers))
    log.info("review.requested", pr_key=pr_key, requested=requested)


async def queue_fixer(session: AsyncSession, rt: Runtime, pr: PullRequest, round_no: int, attempt: int) -> None:
    """In the caller's transaction: the fixer's job and the progress-check that closes it.

    Written with the dispatch itself, so a crash right after cannot leave a round that waits
    for a fixer nobody started; the deadline check runs even if the fixer's job dies with its
    worker, so a round ends as a husk at worst, never hangs.
    """
    timeout = timedelta(seconds=rt.config.fixer.timeout_seconds)
    common = dict(pr_key=pr.pr_key, process_key=pr.process_key, round_no=round_no, payload={"attempt": attempt})
    if rt.config.fixer.kind in RUNS_IN_A_JOB:
        await jobs.enqueue_in(session, rt.db.is_postgres, "fix", f"fix:{pr.process_key}:{round_no}:{attempt}",
                              max_attempts=1, **common)
    await jobs.enqueue_in(session, rt.db.is_postgres, "progress_check",
                          progress_key(pr.process_key, round_no, attempt, "deadline"),
                          run_at=utcnow() + timeout + DEADLINE_MARGIN, **common)


async def ask_fixer(rt: Runtime, pr: PullRequest, round_no: int, attempt: int, findings_text: str,
                    instructions: list[str]) -> None:
    """After the dispatch committed: an asking fixer (mention, author) gets its comment, once."""
    rt.wake_workers()
    kind = rt.config.fixer.kind
    log.info("fixer.dispatched", pr_key=pr.pr_key, round=round_no, attempt=attempt, fixer=kind,
             findings=len(json.loads(findings_text or "[]")))
    if kind in RUNS_IN_A_JOB:
        return
    from bot.fixers.base import FixRequest

    from .read import findings_of

    verdict = await rt.extras["fixer"].run(FixRequest(
        pr_key=pr.pr_key, round_no=round_no, attempt=attempt, title=pr.title, description="",
        head_branch=pr.head_branch or "", entry_head=pr.last_round_head or "", clone_url="", token=None,
        findings=findings_of(findings_text) or (), instructions=tuple(instructions), pr_author=pr.author))
    key = parse_pr_key(pr.pr_key)
    await rt.github.comment_once(key.owner, key.repo, key.number,
                                 f"convergebot:fix:{pr.process_key}:{round_no}:{attempt}",
                                 verdict.comment or "Please address the review findings.")
