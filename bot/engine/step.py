"""The step job: re-read one PR, decide, act. Webhooks and the poller both queue it."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from bot import metrics
from bot.engine import check_summary, outbox, repoconfig, stacks
from bot.engine.dispatch import new_attempt, queue_fixer, queue_progress, requeue, wake_dependents
from bot.engine.escalation import escalate, queue_missing
from bot.engine.merge_stage import MERGE_STATUSES, merge_stage
from bot.engine.observe import Observation, Observed, observe
from bot.engine.read import (
    findings_json,
    pr_state,
    read_snapshot,
    review_of,
    round_state,
    settings_of,
)
from bot.engine.recover import recover_commands
from bot.engine.refs import read_tracked, records_nothing_new
from bot.github.errors import NotFound
from bot.rules.decide import decide_step, fresh_review
from bot.rules.findings import fingerprint
from bot.rules.model import (
    CheckProgress,
    Checks,
    Converge,
    Escalate,
    Fix,
    Heal,
    Nudge,
    Snapshot,
    StartRound,
    Wait,
)
from bot.runtime.context import Runtime
from storage import dependencies, prs, rounds, runs
from storage.keys import PrKey, ProcessKey
from storage.models import Job, PullRequest, utcnow
from storage.prs import PrView
from storage.statuses import RunState, Status

log = structlog.get_logger(__name__)

SETTLING_RETRY_SECONDS = 3.0


async def step(rt: Runtime, job: Job) -> None:
    # One step per PR at a time, in this process and across replicas (`Runtime.pr_turn`); the
    # fenced writes below still expect exactly what the step read.
    pr_key = prs.pr_key_of(job)
    async with rt.pr_turn(pr_key):
        await _step(rt, pr_key)


async def _end(rt: Runtime, pr_key: PrKey, pk: ProcessKey, values: dict, state: RunState) -> bool:
    """The row's terminal write and the run's end, in one transaction: a reader never sees a
    finished row whose run still reads active, or the reverse."""
    async with rt.db.session() as s:
        won = await prs.fenced_update(None, pr_key, pk, values, session=s)
        if won:
            await runs.end_run(None, pk, state, values["outcome"], session=s)
        if won and values.get("status") == Status.MERGED:
            await wake_dependents(s, pr_key)  # merged by someone else: as after the bot's own merge
    return won


async def _step(rt: Runtime, pr_key: PrKey) -> None:
    view = await prs.get(rt.db, pr_key)
    if view is None or view.resubmittable:
        # A PR the bot does not drive (not enrolled, or finished) may still be a stack's parent:
        # whatever woke it (its merge, its branch deleted) is news to the PRs stacked on it.
        async with rt.db.session() as s:
            for edge in await dependencies.stacked_children(s, pr_key):
                await requeue(s, edge.child, "stack_parent_changed")
        return
    pr = view.pr
    pk = prs.process_key_of(pr)
    bound = log.bind(pr_key=pr_key, process_key=pk, round=pr.current_round)
    try:
        seen, unchanged = await read_tracked(rt, pr_key)
    except NotFound:
        # A key for a PR that does not exist (a typo in `submit`), or one the credentials cannot
        # see: end the run instead of polling a 404 for ever.
        outcome = "the PR was not found on GitHub (or the credentials cannot see it)"
        if await _end(rt, pr_key, pk, {"status": Status.ABANDONED, "outcome": outcome}, RunState.TERMINATED):
            bound.warning("step.pr_not_found")
        return
    observed = observe(pr, seen)
    if observed.end_run is not None:
        # Closed or merged on GitHub: the terminal row and the run's end commit together, or the
        # run would stay active behind a finished row and its queued jobs would still own the PR.
        if await _end(rt, pr_key, pk, observed.values, observed.end_run):
            bound.info("step.ended_outside", outcome=observed.values["outcome"])
            metrics.merged("merge_queue" if pr.merge_group else "merge",
                           observed.values["outcome"] == "merged")  # the bot's merge, seen here
            await check_summary.publish(rt, pr_key)
        return
    # The repository's settings, read (at most once per interval) before anything decides: code
    # below that runs inside a transaction takes them from the process's copy.
    await repoconfig.effective_config(rt, pr.repo)
    if unchanged and rt.skip_unchanged and await _nothing_due(rt, view, observed, seen):
        # GitHub answered 304 to every read, the row holds all of it already, and the decision
        # is to wait: nothing to write (not even `synced_at`), no GitHub read beyond the three.
        bound.debug("step.unchanged")
        return
    if not await prs.fenced_update(rt.db, pr_key, pk, observed.values):
        bound.info("step.stale")
        return
    if pr.status == Status.ESCALATED:
        await queue_missing(rt, pr_key)
        await recover_commands(rt, pr)
    pr = pr.model_copy(update=observed.values)  # the row as just written, without reading it back
    await stacks.note(rt, pr, seen.pr)  # while its parent is open: afterwards none could say
    if pr.status in MERGE_STATUSES:
        await merge_stage(rt, pr, seen.pr, bound)
        await check_summary.publish(rt, pr_key)
        return
    snap = await read_snapshot(rt, pr, seen.head_sha, list(seen.reviews))
    if (due := snap.replies_due) is not None:  # `snap.threads_settling`
        # A fresh review came while our replies to the last round are still being posted: look
        # again once they may be done (their webhooks are echoes and wake nothing). A reply
        # effect backing off through a GitHub failure sets the pace, not a 3 s loop.
        wait = max(0.0, (due - utcnow()).total_seconds())
        async with rt.db.session() as s:
            await requeue(s, pr_key, "settling", delay_seconds=wait + SETTLING_RETRY_SECONDS)
    decision = decide_step(snap)
    for action in decision.actions:
        if not await _apply(rt, pr, action, bound):
            break
        if isinstance(action, Converge) and not pr.converge_only:
            # Converged: the merge stage's first decision is made from this step's read, in this
            # job (left unfinished by a crash, it runs again), not by another sync reading the
            # same PR a moment later.
            await merge_stage(rt, pr.model_copy(update={"status": Status.WAITING_DEPS, "converged_head": action.head}),
                              seen.pr, bound)
            break
    await check_summary.publish(rt, pr_key)


async def _nothing_due(rt: Runtime, view: PrView, observed: Observed, seen: Observation) -> bool:
    """Whether the step of an unchanged PR would decide only to wait and write nothing.

    Only a PR waiting for a review qualifies (every other status acts on what it reads, or has
    its own upkeep: the merge stage, an escalation's missing comments and heal), owned by an
    active run, whose row already holds everything just read. Then the decision is made as the
    full step would make it, on the row, the current round and the reviews: no fresh review
    (that one needs threads and checks), and a review timeout, a nudge or a new round that has
    come due is acted on by the full step. Escalations and adjudications only count once a
    fresh review is there, so they are not read. And the check run must already say what the
    row says, or the full step's publish would queue an update.
    """
    pr = view.pr
    if not view.awaits_review or seen.head_sha is None or not records_nothing_new(pr, observed.values):
        return False
    rnd = await rounds.get(rt.db, pr.pr_key, prs.process_key_of(pr), pr.current_round)
    reviews = tuple(review_of(r) for r in seen.reviews if isinstance(r.get("id"), int))
    snap = Snapshot(pr=pr_state(pr), round=round_state(rnd), head=seen.head_sha, reviews=reviews,
                    threads=None, checks=Checks("success"), open_escalations=0, adjudications={},
                    now=utcnow(), settings=settings_of(rt, repoconfig.current(rt, pr.repo).config))
    if fresh_review(snap) is not None or not all(isinstance(a, Wait) for a in decide_step(snap).actions):
        return False
    return check_summary.says(rt, view, rnd)


class _Lost(Exception):
    """A fenced write lost inside a transaction whose other writes must not commit alone."""


async def _apply(rt: Runtime, pr: PullRequest, action, bound) -> bool:
    """Apply one action; False stops the decision (a fenced write lost: someone else moved on).

    Each write and the GitHub effects it decides commit together (the outbox), so a crash
    between them can neither lose the effect nor make one nobody decided.
    """
    apply = APPLY.get(type(action))
    if apply is None:
        raise TypeError(f"unknown action {action!r}")
    return await apply(rt, pr, action, bound)


async def _wait(rt: Runtime, pr: PullRequest, action: Wait, bound) -> bool:
    bound.debug("step.wait", reason=action.reason)
    return True


async def _start_round(rt: Runtime, pr: PullRequest, action: StartRound, bound) -> bool:
    pk = prs.process_key_of(pr)
    now = utcnow()
    n = pr.current_round
    # Fenced on exactly the status and the wait this step read: a second step that decided
    # the same start from the same read (another replica, or one that read before this
    # one wrote) loses, so one round start asks for one review.
    async with rt.db.session() as s:
        won = await prs.fenced_update(None, pr.pr_key, pk, {
            "status": Status.WAITING_REVIEW, "last_round_head": action.entry_head,
            "waiting_since": now, "last_nudge_at": now, "last_action": action.reason,
            "last_review_id": action.review_baseline,
        }, expect_status=pr.status, expect_round=n, expect={"waiting_since": pr.waiting_since}, session=s)
        if won:
            await rounds.start(s, pr.pr_key, pk, n, action.entry_head)
            # A round may start again at the same head (healed, retried): the key is the
            # decision's time, and the fenced write above makes the decision once.
            await outbox.request_review(s, pr.pr_key, pk, n, f"start:{now.isoformat()}",
                                        action.entry_head, action.review_baseline, reviews_known_at=now)
    if won:
        bound.info("round.started", entry_head=action.entry_head, reason=action.reason)
    return won


async def _nudge(rt: Runtime, pr: PullRequest, action: Nudge, bound) -> bool:
    pk = prs.process_key_of(pr)
    now = utcnow()
    n = pr.current_round
    # Fenced on the nudge this step read: a second step that decided the same nudge from the
    # same read (another replica, or one that read before this one wrote) loses, so one nudge
    # due asks the reviewers once.
    async with rt.db.session() as s:
        won = await prs.fenced_update(None, pr.pr_key, pk, {"last_nudge_at": now, "last_action": "nudged reviewers"},
                                      expect_status=Status.WAITING_REVIEW, expect_round=n,
                                      expect={"last_nudge_at": pr.last_nudge_at}, session=s)
        if won:
            await outbox.request_review(s, pr.pr_key, pk, n, f"nudge:{now.isoformat()}",
                                        pr.last_round_head, pr.last_review_id, reviews_known_at=now,
                                        nudge=True)
    if won:
        bound.info("review.nudged")
    return won


async def _fix(rt: Runtime, pr: PullRequest, action: Fix, bound) -> bool:
    pk = prs.process_key_of(pr)
    now = utcnow()
    n = pr.current_round
    text = findings_json(action.findings)
    fence: dict[str, Any] = {"expect_status": Status.WAITING_REVIEW, "expect_round": n}
    try:
        async with rt.db.session() as s:
            if action.findings and not await prs.fenced_update(None, pr.pr_key, pk, {
                "status": Status.CONVERGING, "last_review_id": action.review_id, "husk_retries": 0,
                "last_action": f"fixer asked to address {len(action.findings)} finding(s)",
            }, **fence, session=s):
                return False
            # Keyed by the threads answered: a later step of the round answering others (a
            # repeat that came with another reviewer's review) is an effect of its own, the
            # same ones not.
            answered = fingerprint(*sorted(f.thread_id or "" for f, _ in action.declines))[:16]
            queued = await outbox.replies(s, pr.pr_key, pk, [(f, reason, True) for f, reason in action.declines],
                                          key=f"{n}:declined:{answered}", round_no=n)
            if action.findings:
                attempt = await new_attempt(s, pr.pr_key, pk, n, {
                    "review_id": action.review_id, "findings": text, "fixer": rt.config.fixer.kind,
                    "fixer_started_at": now, "instructions": json.dumps(action.instructions)})
                await queue_fixer(s, rt, pr, n, attempt, text, action.instructions)
            elif queued:
                # Declines decided from a round that is still the row's, or none go out (a
                # retry or the next round meanwhile): the replies roll back with a lost fence.
                if not await prs.fenced_update(None, pr.pr_key, pk, {
                        "last_action": f"declined {len(action.declines)} finding(s)"}, **fence, session=s):
                    raise _Lost
                # Nothing for the fixer: look again once the replies are posted, and converge.
                await requeue(s, pr.pr_key, "answered", delay_seconds=SETTLING_RETRY_SECONDS)
    except _Lost:
        bound.info("step.stale", reason="the declines' round moved on")
        return False
    if action.findings:
        return True
    # Only answers: the Converge after this goes ahead once no reply of the PR is left to
    # post (posted, or given up: a thread left unanswered must not hold the PR forever).
    return not queued and not await outbox.pending(rt.db, pr.pr_key, "reply", dry_run=rt.config.github.dry_run)


async def _converge(rt: Runtime, pr: PullRequest, action: Converge, bound) -> bool:
    pk = prs.process_key_of(pr)
    now = utcnow()
    n = pr.current_round
    status = Status.CONVERGED if pr.converge_only else Status.WAITING_DEPS
    async with rt.db.session() as s:
        won = await prs.fenced_update(None, pr.pr_key, pk, {
            "status": status, "last_review_id": action.review_id, "converged_head": action.head,
            "converged_at": now, "outcome": "converged" if pr.converge_only else None,
            "last_action": f"converged at {action.head[:7]}",
        }, expect_status=Status.WAITING_REVIEW, expect_round=n, session=s)
        if won:
            await rounds.update_round(s, pr.pr_key, pk, n, {
                # The findings left below `block_on`: the check run lists them.
                "review_id": action.review_id, "findings": findings_json(action.optional), "status": "converged",
                "exit_head": action.head, "ended_at": now})
            if pr.converge_only:
                await runs.end_run(None, pk, RunState.COMPLETED, "converged", session=s)
    if won:
        bound.info("pr.converged", head=action.head)
    return won


async def _escalate(rt: Runtime, pr: PullRequest, action: Escalate, bound) -> bool:
    # A stalled review is decided from a wait: fenced on exactly that wait, so a step that
    # read it before a review came (and the round went to the fixer) or before the round
    # restarted asks nobody.
    async with rt.db.session() as s:
        esc = await escalate(s, rt, pr, action, expect_status=Status.WAITING_REVIEW,
                             expect={"waiting_since": pr.waiting_since})
    return esc is not None


async def _check_progress(rt: Runtime, pr: PullRequest, action: CheckProgress, bound) -> bool:
    pk = prs.process_key_of(pr)
    n = pr.current_round
    async with rt.db.session() as s:
        await queue_progress(s, pr.pr_key, pk, n, action.attempt, action.why)
    return True


async def _heal(rt: Runtime, pr: PullRequest, action: Heal, bound) -> bool:
    pk = prs.process_key_of(pr)
    async with rt.db.session() as s:
        # Fenced on `escalated`: a heal decided from a row read before a maintainer's answer
        # resumed the PR (or the run moved on) must not overwrite what that answer wrote.
        won = await prs.fenced_update(None, pr.pr_key, pk, {
            "status": Status.CONVERGING, "escalated_at": None, "last_action": "resumed: no open escalation",
        }, expect_status=Status.ESCALATED, session=s)
        if won:
            await requeue(s, pr.pr_key, "healed")
    if won:
        bound.info("escalation.healed")
    return won


# Each action the rules decide, and the write that applies it.
APPLY: dict[type, Callable[..., Awaitable[bool]]] = {
    Wait: _wait,
    StartRound: _start_round,
    Nudge: _nudge,
    Fix: _fix,
    Converge: _converge,
    Escalate: _escalate,
    CheckProgress: _check_progress,
    Heal: _heal,
}
