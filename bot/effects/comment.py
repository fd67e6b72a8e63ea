"""The comment effects: a comment posted once (its hidden marker found before posting again), a
round's thread replies, and a reaction."""

from __future__ import annotations

import structlog

from bot.effects.replies import Reply, reply_and_resolve
from bot.engine import outbox
from bot.engine.outbox import first_try
from bot.github.errors import NotFound
from bot.runtime.context import Runtime
from storage import escalations, prs, rounds
from storage.models import Job

log = structlog.get_logger(__name__)


async def comment(rt: Runtime, job: Job, p: dict) -> None:
    key = prs.pr_key_of(job)
    posted = await rt.github.pr(key).comment_once(p["marker"], p["body"])
    if p.get("escalation_id") is not None:
        await escalations.set_comment(rt.db, p["escalation_id"], posted["id"])


async def reply(rt: Runtime, job: Job, p: dict) -> None:
    # A round's replies are one effect; an effect queued by an older version names one thread.
    items = p["replies"] if "replies" in p else [p]
    replies = [Reply(i["thread_id"], i["text"], i["resolve"]) for i in items]
    await reply_and_resolve(rt, prs.pr_key_of(job), replies, await _answered(rt, job, p, items))


async def _answered(rt: Runtime, job: Job, p: dict, items: list[dict]) -> dict[str, bool] | None:
    """What the round's read showed of our replies on these threads, when it still holds.

    It holds on the first try of an effect when no other reply effect of the PR was queued
    since the round began. The round's fresh review was read only once no reply effect of the
    PR was left to run (`threads_settling` in the step), so every earlier reply of ours is in
    what it read; a later one (an earlier fixer attempt of this round, the round's declines)
    may not be, and neither may a write of this effect's own lost try. Then, or when a thread's
    comments were not all read, the effect reads the threads itself (None).
    """
    if not first_try(job) or p.get("round") is None or job.process_key is None:
        return None
    answered = {i["thread_id"]: i.get("answered") for i in items}
    known = {thread: v for thread, v in answered.items() if v is not None}
    if len(known) < len(answered):
        return None
    pr_key = prs.pr_key_of(job)
    rnd = await rounds.get(rt.db, pr_key, job.process_key, p["round"])
    if rnd is None or await outbox.queued_since(rt.db, pr_key, "reply", rnd.started_at, besides=job.id):
        return None
    return known


async def react(rt: Runtime, job: Job, p: dict) -> None:
    # GitHub answers 200 to a reaction the user already made: a repeat creates nothing.
    key = prs.pr_key_of(job)
    try:
        await rt.github.pr(key).react(p["comment_id"], p["content"], review_comment=p["review_comment"])
    except NotFound:
        log.info("reaction.comment_gone", pr_key=job.pr_key, comment_id=p["comment_id"])  # deleted meanwhile
