"""Escalations: the fenced write that asks, and its comment (rendering is pure; the comment is
an outbox effect, so it is posted once, after the write commits, however often anything retries)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import structlog
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.engine import outbox, repoconfig
from bot.rules.model import Escalate
from bot.runtime.context import Runtime
from storage import escalations, prs
from storage.keys import PrKey, ProcessKey
from storage.models import Escalation, PullRequest, utcnow
from storage.statuses import Status

log = structlog.get_logger(__name__)

KIND_TITLES = {
    "review_stalled": "Review stalled",
    "round_cap": "Round cap reached",
    "husk": "The fixer does not finish",
    "no_advance": "The fixer made no progress",
    "needs_input": "The fixer needs input",
    "blocked": "The fixer is blocked",
    "churn": "Review churn",
    "merge": "Cannot merge",
    "checks_missing": "Required checks have not reported",
    "review_checks": "Required checks have not reported",
    "runaway": "Paused: too many writes",
    "fork": "Not fixed here: the branch is in a fork",
    "agent_budget": "Paused: the agent's budget is spent",
}


def marker(escalation_id: int) -> str:
    return f"convergebot:escalation:{escalation_id}"


def stored_id(esc: Escalation) -> int:
    """The id of an escalation read from the table or just written to it (the model's None is
    for one not inserted yet, which nothing here holds)."""
    if esc.id is None:
        raise ValueError(f"an escalation of {esc.pr_key} that was never stored has no id")
    return esc.id


def render(esc: Escalation, maintainers: list[str]) -> str:
    who = " ".join(f"@{m.lstrip('@')}" for m in maintainers) or "Maintainers"
    title = KIND_TITLES.get(esc.kind, esc.kind)
    return (
        f"**convergebot escalation #{esc.id}**: {title} (round {esc.round_no})\n\n"
        f"{who}, convergebot needs a decision:\n\n{esc.question}\n\n"
        "Answer with `/converge answer <your answer>` (or quote-reply this comment with your answer). "
        "An answer that starts with *decline* declines the finding. `/converge stop` abandons the run."
    )


def _maintainers(rt: Runtime, pr_key: PrKey) -> list[str]:
    # Inside the caller's transaction: the repository's settings as the step read them, no read.
    return repoconfig.current(rt, pr_key.full_repo).config.convergence.maintainers


async def queue_comment(session: AsyncSession, rt: Runtime, esc: Escalation) -> None:
    """The escalation's comment, as an effect keyed on the escalation: posted once."""
    await outbox.comment(session, esc.pr_key, marker(stored_id(esc)), render(esc, _maintainers(rt, esc.pr_key)),
                         process_key=esc.process_key, escalation_id=esc.id)


async def escalate(
    session: AsyncSession, rt: Runtime, pr: PullRequest, action: Escalate, *,
    expect_status: str | Collection[str], extra: dict[str, Any] | None = None,
    process_key: ProcessKey | None = None, expect: dict[str, Any] | None = None,
) -> Escalation | None:
    """In the caller's transaction: status `escalated`, the escalation row and its comment.

    Fenced on the run, the expected status and the round, so of two deciders only one asks.
    A job passes its own `process_key`: the row it read may already carry a newer run's.
    """
    pk = process_key or prs.process_key_of(pr)
    won = await prs.fenced_update(None, pr.pr_key, pk, {
        "status": Status.ESCALATED, "escalated_at": utcnow(),
        "last_action": f"escalated: {action.kind}", **(extra or {}),
    }, expect_status=expect_status, expect_round=pr.current_round, expect=expect, session=session)
    if not won:
        return None
    esc = await escalations.create(session, pr.pr_key, pk, pr.current_round, action.kind,
                                   action.question, action.fingerprint or action.kind)
    await queue_comment(session, rt, esc)
    log.info("pr.escalated", pr_key=pr.pr_key, kind=action.kind, escalation_id=esc.id)
    return esc


async def queue_missing(rt: Runtime, pr_key: PrKey) -> None:
    """Open escalations whose comment is not known to be posted get their effect again; its
    key is the escalation's, so one still queued (or done) is not doubled."""
    missing = [e for e in await escalations.open_for(rt.db, pr_key) if e.comment_id is None]
    if not missing:
        return
    async with rt.db.session() as s:
        for esc in missing:
            await queue_comment(s, rt, esc)
    rt.wake_workers()
