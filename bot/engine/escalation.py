"""Escalation comments (rendering is pure; posting is marker-deduplicated)."""

from __future__ import annotations

from bot.prkey import parse_pr_key
from bot.runtime import Runtime
from storage import escalations
from storage.models import Escalation

KIND_TITLES = {
    "review_stalled": "Review stalled",
    "round_cap": "Round cap reached",
    "husk": "The fixer does not finish",
    "no_advance": "The fixer made no progress",
    "needs_input": "The fixer needs input",
    "blocked": "The fixer is blocked",
    "churn": "Review churn",
    "merge": "Cannot merge",
}


def marker(escalation_id: int) -> str:
    return f"convergebot:escalation:{escalation_id}"


def render(esc: Escalation, maintainers: list[str]) -> str:
    who = " ".join(f"@{m.lstrip('@')}" for m in maintainers) or "Maintainers"
    title = KIND_TITLES.get(esc.kind, esc.kind)
    return (
        f"**convergebot escalation #{esc.id}**: {title} (round {esc.round_no})\n\n"
        f"{who}, convergebot needs a decision:\n\n{esc.question}\n\n"
        "Answer with `/converge answer <your answer>` (or quote-reply this comment with your answer). "
        "An answer that starts with *decline* declines the finding. `/converge stop` abandons the run."
    )


async def post(rt: Runtime, esc: Escalation) -> None:
    """Post once: a retried job finds the comment by its hidden marker instead of posting again."""
    key = parse_pr_key(esc.pr_key)
    comment = await rt.github.comment_once(
        key.owner, key.repo, key.number, marker(esc.id), render(esc, rt.config.convergence.maintainers)
    )
    await escalations.set_comment(rt.db, esc.id, comment["id"])


async def post_missing(rt: Runtime, pr_key: str) -> None:
    """Open escalations whose comment was never posted (a crash after the write) get it now."""
    for esc in await escalations.open_for(rt.db, pr_key):
        if esc.comment_id is None:
            await post(rt, esc)
