"""The step job: re-read one PR, decide, act. Webhooks and the poller both queue it."""

from __future__ import annotations

import json

import structlog

from bot.github.errors import NotFound
from bot.runtime import Runtime
from bot.sync import read_observation
from storage import escalations, jobs, prs, rounds, runs
from storage.models import Job, PullRequest, utcnow
from storage.statuses import RunState, Status

from . import checkrun
from .decide import decide_step
from .dispatch import ask_fixer, progress_key, queue_fixer, request_review
from .escalation import post, post_missing
from .merging import MERGE_STATUSES, merge_stage
from .model import CheckProgress, Converge, Escalate, Fix, Heal, Nudge, StartRound, Wait
from .observe import observe
from .read import findings_json, read_snapshot
from .threads import decline_threads

log = structlog.get_logger(__name__)


async def step(rt: Runtime, job: Job) -> None:
    # One step per PR at a time in this process; across processes the fenced writes decide.
    async with rt.step_locks.hold(job.pr_key):
        await _step(rt, job.pr_key)


async def _step(rt: Runtime, pr_key: str) -> None:
    view = await prs.get(rt.db, pr_key)
    if view is None or view.resubmittable:
        return
    pr = view.pr
    pk = pr.process_key
    bound = log.bind(pr_key=pr_key, process_key=pk, round=pr.current_round)
    try:
        seen = await read_observation(rt, pr_key)
    except NotFound:
        # A key for a PR that does not exist (a typo in `submit`), or one the credentials cannot
        # see: end the run instead of polling a 404 for ever.
        outcome = "the PR was not found on GitHub (or the credentials cannot see it)"
        if await prs.fenced_update(rt.db, pr_key, pk, {"status": Status.ABANDONED, "outcome": outcome}):
            await runs.end_run(rt.db, pk, RunState.TERMINATED, outcome)
            bound.warning("step.pr_not_found")
        return
    observed = observe(pr, seen)
    if not await prs.fenced_update(rt.db, pr_key, pk, observed.values):
        bound.info("step.stale")
        return
    if observed.end_run is not None:
        await runs.end_run(rt.db, pk, observed.end_run, observed.values["outcome"])
        bound.info("step.ended_outside", outcome=observed.values["outcome"])
        return
    if pr.status == Status.ESCALATED:
        await post_missing(rt, pr_key)
    pr = pr.model_copy(update=observed.values)  # the row as just written, without reading it back
    if pr.status in MERGE_STATUSES:
        await merge_stage(rt, pr, seen.pr, bound)
        await checkrun.publish(rt, pr_key)
        return
    snap = await read_snapshot(rt, pr, seen.head_sha, list(seen.reviews))
    decision = decide_step(snap)
    for action in decision.actions:
        if not await _apply(rt, pr, action, bound):
            break
    await checkrun.publish(rt, pr_key)


async def _apply(rt: Runtime, pr: PullRequest, action, bound) -> bool:
    """Apply one action; False stops the decision (a fenced write lost: someone else moved on)."""
    pk, now, n = pr.process_key, utcnow(), pr.current_round
    if isinstance(action, Wait):
        bound.debug("step.wait", reason=action.reason)
        return True
    if isinstance(action, StartRound):
        async with rt.db.session() as s:
            won = await prs.fenced_update(None, pr.pr_key, pk, {
                "status": Status.WAITING_REVIEW, "last_round_head": action.entry_head,
                "waiting_since": now, "last_nudge_at": now, "last_action": action.reason,
                "last_review_id": action.review_baseline,
            }, expect_status=(Status.CONVERGING, Status.WAITING_REVIEW), expect_round=n, session=s)
            if won:
                await rounds.start(s, pr.pr_key, pk, n, action.entry_head)
        if won:
            await request_review(rt, pr.pr_key)
            bound.info("round.started", entry_head=action.entry_head, reason=action.reason)
        return won
    if isinstance(action, Nudge):
        won = await prs.fenced_update(rt.db, pr.pr_key, pk, {"last_nudge_at": now, "last_action": "nudged reviewers"},
                                      expect_status=Status.WAITING_REVIEW, expect_round=n)
        if won:
            await request_review(rt, pr.pr_key)
            bound.info("review.nudged")
        return won
    if isinstance(action, Fix):
        if action.declines:
            await decline_threads(rt, pr.pr_key, action.declines)
        if not action.findings:
            return True
        text = findings_json(action.findings)
        async with rt.db.session() as s:
            won = await prs.fenced_update(None, pr.pr_key, pk, {
                "status": Status.CONVERGING, "last_review_id": action.review_id, "husk_retries": 0,
                "last_action": f"fixer asked to address {len(action.findings)} finding(s)",
            }, expect_status=Status.WAITING_REVIEW, expect_round=n, session=s)
            if won:
                attempt = await rounds.next_attempt(s, pr.pr_key, pk, n, {
                    "review_id": action.review_id, "findings": text, "fixer": rt.config.fixer.kind,
                    "fixer_started_at": now, "instructions": json.dumps(action.instructions)})
                await queue_fixer(s, rt, pr, n, attempt)
        if won:
            await ask_fixer(rt, pr, n, attempt, text, list(action.instructions))
        return won
    if isinstance(action, Converge):
        status = Status.CONVERGED if pr.converge_only else Status.WAITING_DEPS
        async with rt.db.session() as s:
            won = await prs.fenced_update(None, pr.pr_key, pk, {
                "status": status, "last_review_id": action.review_id, "converged_head": action.head,
                "converged_at": now, "outcome": "converged" if pr.converge_only else None,
                "last_action": f"converged at {action.head[:7]}",
            }, expect_status=Status.WAITING_REVIEW, expect_round=n, session=s)
            if won:
                await rounds.update_round(s, pr.pr_key, pk, n, {
                    "review_id": action.review_id, "findings": "[]", "status": "converged",
                    "exit_head": action.head, "ended_at": now})
                if pr.converge_only:
                    await runs.end_run(None, pk, RunState.COMPLETED, "converged", session=s)
        if won:
            bound.info("pr.converged", head=action.head)
            if not pr.converge_only:
                await _requeue(rt, pr.pr_key, "converged")
        return won
    if isinstance(action, Escalate):
        return await escalate(rt, pr, action, bound, expect_status=(Status.CONVERGING, Status.WAITING_REVIEW))
    if isinstance(action, CheckProgress):
        await jobs.enqueue(rt.db, "progress_check", progress_key(pk, n, action.attempt, "push"), pr_key=pr.pr_key,
                           process_key=pk, round_no=n, payload={"attempt": action.attempt})
        rt.wake_workers()
        return True
    if isinstance(action, Heal):
        won = await prs.fenced_update(rt.db, pr.pr_key, pk, {
            "status": Status.CONVERGING, "escalated_at": None, "last_action": "resumed: no open escalation",
        }, expect_status=Status.ESCALATED)
        if won:
            bound.info("escalation.healed")
            await _requeue(rt, pr.pr_key, "healed")
        return won
    raise TypeError(f"unknown action {action!r}")


async def _requeue(rt: Runtime, pr_key: str, why: str) -> None:
    """Take the next step now rather than at the next webhook or poll."""
    await jobs.enqueue(rt.db, "sync", f"sync:{pr_key}:{why}:{utcnow().isoformat()}", pr_key=pr_key)
    rt.wake_workers()


async def escalate(rt: Runtime, pr: PullRequest, action: Escalate, bound, *, expect_status, extra=None,
                   session=None) -> bool:
    """Status `escalated` and the escalation row in one write; then the comment, once."""
    async def write(s) -> tuple[bool, object]:
        won = await prs.fenced_update(None, pr.pr_key, pr.process_key, {
            "status": Status.ESCALATED, "escalated_at": utcnow(),
            "last_action": f"escalated: {action.kind}", **(extra or {}),
        }, expect_status=expect_status, expect_round=pr.current_round, session=s)
        esc = None
        if won:
            esc = await escalations.create(s, pr.pr_key, pr.process_key, pr.current_round, action.kind,
                                           action.question, action.fingerprint or action.kind)
        return won, esc

    if session is not None:
        return (await write(session))[0]
    async with rt.db.session() as s:
        won, esc = await write(s)
    if won:
        bound.info("pr.escalated", kind=action.kind, escalation_id=esc.id)
        await post(rt, esc)
    return won
