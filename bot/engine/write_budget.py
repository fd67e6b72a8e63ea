"""The per-PR write budget: a run that writes too much to GitHub is paused and escalated.

A loop nobody foresaw (an agent that never settles, a remembered answer that keeps rerunning)
must cost a bounded number of comments, not hundreds: past `budget.comments_per_hour` or
`budget.writes_per_hour` the run is escalated as "runaway" and its pending writes are skipped.
A maintainer's answer gives it a fresh hour.
"""

from __future__ import annotations

import json
from datetime import timedelta

from sqlalchemy import bindparam, func
from sqlmodel import col, select

from bot.engine.escalation import escalate
from bot.rules.findings import fingerprint
from bot.rules.model import Escalate
from bot.runtime.context import Runtime
from storage import escalations, prs
from storage.jobs import JobStatus
from storage.keys import PrKey, ProcessKey
from storage.models import Escalation, Job, PullRequest, read_pr_keys, utcnow
from storage.statuses import ACTIVE, JobKind, Status

WINDOW = timedelta(hours=1)
RUNAWAY = "runaway"


# Built once: the count runs before every effect. Parameters: pr_key, and since (the hour's
# start, or a maintainer's later answer to a runaway escalation: a fresh hour).
_ANSWERED = select(Escalation.answered_at).where(
    Escalation.pr_key == bindparam("pr_key"), Escalation.kind == RUNAWAY, col(Escalation.answered_at).is_not(None))
_DONE = (Job.kind == JobKind.EFFECT, Job.pr_key == bindparam("pr_key"), col(Job.process_key).is_not(None),
         Job.status == JobStatus.DONE, Job.finished_at >= bindparam("since"))
_WRITES = select(func.count()).select_from(Job).where(*_DONE)
_POSTED = select(Job.payload).where(
    *_DONE, col(Job.payload).contains('"effect": "comment"') | col(Job.payload).contains('"effect": "reply"'))


async def over_budget(rt: Runtime, pr_key: PrKey, effect: str) -> str | None:
    """Why this write would break the PR's budget, or None."""
    cfg = rt.config.budget
    # Reads only (the pause below looks again under the PR's row lock): one read transaction.
    async with rt.db.read_session() as s:
        answered = (await s.exec(_ANSWERED, params={"pr_key": pr_key})).all()
        params = {"pr_key": pr_key, "since": max([utcnow() - WINDOW, *answered])}
        writes = (await s.exec(_WRITES, params=params)).one()
        posted = (await s.exec(_POSTED, params=params)).all()
    comments = sum(comments_of(p) for p in posted)
    if writes >= cfg.writes_per_hour:
        return f"{writes} GitHub writes within the hour (budget {cfg.writes_per_hour})"
    if effect in ("comment", "reply") and comments >= cfg.comments_per_hour:
        return f"{comments} comments within the hour (budget {cfg.comments_per_hour})"
    return None


def comments_of(payload: str) -> int:
    """The comments an effect posted: one, or one per thread of a round's replies."""
    return max(1, len(json.loads(payload).get("replies") or ()))


async def pause_runaway(rt: Runtime, pr_key: PrKey, process_key: ProcessKey, why: str) -> None:
    """Escalate the run as runaway, once: a run already paused stays paused."""
    view = await prs.get(rt.db, pr_key)
    if view is None or view.pr.process_key != process_key or view.resubmittable:
        return
    if any(e.kind == RUNAWAY for e in await escalations.open_for(rt.db, pr_key)):
        return
    question = (f"convergebot paused this PR: its run made {why}. That looks like a loop. "
                "Answer to resume with a fresh budget, or stop it with `/converge stop`.")
    action = Escalate(RUNAWAY, question, fingerprint(RUNAWAY, process_key, utcnow().isoformat()))
    async with rt.db.session() as s:
        # Several workers can find the run over budget at once (each with an effect of its own),
        # and the look above is outside any transaction: look again with the PR's row locked
        # (FOR UPDATE on PostgreSQL; SQLite's write transaction is already exclusive), so one
        # runaway escalation is made however many of them got here.
        await s.exec(select(PullRequest.pr_key).where(PullRequest.pr_key == pr_key).with_for_update())
        if await _open_runaway(s, pr_key):
            return
        await escalate(s, rt, view.pr, action, expect_status=tuple(ACTIVE | {Status.ESCALATED}))
    rt.wake_workers()


async def _open_runaway(session, pr_key: PrKey) -> bool:
    return (await session.exec(select(Escalation.id).where(
        Escalation.pr_key == pr_key, Escalation.kind == RUNAWAY, Escalation.status == "open").limit(1))).first() is not None


async def paused(rt: Runtime) -> list[PrKey]:
    """PRs whose run is paused at its budget (for /readyz and /metrics)."""
    async with rt.db.session() as s:
        rows = await s.exec(select(Escalation.pr_key).where(
            Escalation.kind == RUNAWAY, Escalation.status == "open"))
        return sorted(set(read_pr_keys(rows)))
