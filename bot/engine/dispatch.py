"""Starting a fixer run and asking for reviews: the shared moves of step, progress and commands."""

from __future__ import annotations

import json
from datetime import timedelta

import structlog

from bot.prkey import parse_pr_key
from bot.runtime import Runtime
from storage import jobs
from storage.models import PullRequest, utcnow

log = structlog.get_logger(__name__)

DEADLINE_MARGIN = timedelta(seconds=60)


def progress_key(process_key: str, round_no: int, attempt: int, why: str) -> str:
    return f"pc:{process_key}:{round_no}:{attempt}:{why}"


async def request_review(rt: Runtime, pr_key: str) -> None:
    key = parse_pr_key(pr_key)
    requested = await rt.github.request_review(
        key.owner, key.repo, key.number, list(rt.config.convergence.reviewers))
    log.info("review.requested", pr_key=pr_key, requested=requested)


async def dispatch_fixer(rt: Runtime, pr: PullRequest, round_no: int, attempt: int, findings_text: str,
                         instructions: list[str]) -> None:
    """Queue the fixer for this round attempt, and the progress-check that closes it.

    The deadline progress-check runs even if the fixer's job dies with its worker: a round can
    end as a husk, never hang.
    """
    kind = rt.config.fixer.kind
    timeout = timedelta(seconds=rt.config.fixer.timeout_seconds)
    common = dict(pr_key=pr.pr_key, process_key=pr.process_key, round_no=round_no)
    if kind in ("command", "fake"):
        await jobs.enqueue(rt.db, "fix", f"fix:{pr.process_key}:{round_no}:{attempt}",
                           payload={"attempt": attempt}, max_attempts=1, **common)
    else:
        from bot.fixers.base import FixRequest

        from .read import findings_of

        fixer = rt.extras["fixer"]
        verdict = await fixer.run(FixRequest(
            pr_key=pr.pr_key, round_no=round_no, attempt=attempt, title=pr.title, description="",
            head_branch=pr.head_branch or "", entry_head=pr.last_round_head or "", clone_url="",
            token=None, findings=findings_of(findings_text) or (), instructions=tuple(instructions)))
        key = parse_pr_key(pr.pr_key)
        await rt.github.comment_once(key.owner, key.repo, key.number,
                                     f"convergebot:fix:{pr.process_key}:{round_no}:{attempt}",
                                     verdict.comment or "Please address the review findings.")
    await jobs.enqueue(rt.db, "progress_check", progress_key(pr.process_key, round_no, attempt, "deadline"),
                       payload={"attempt": attempt}, run_at=utcnow() + timeout + DEADLINE_MARGIN, **common)
    rt.wake_workers()
    log.info("fixer.dispatched", pr_key=pr.pr_key, round=round_no, attempt=attempt, fixer=kind,
             findings=len(json.loads(findings_text or "[]")))
