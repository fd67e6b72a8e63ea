"""The progress-check job (DESIGN §6.6): after the fixer, did the branch move?"""

from __future__ import annotations

import json

import structlog

from bot.github.errors import GitHubError
from bot.prkey import parse_pr_key
from bot.runtime import Runtime
from storage import prs, rounds
from storage.models import Job, utcnow
from storage.statuses import Status

from . import checkrun
from .decide import decide_progress
from .dispatch import ask_fixer, queue_fixer, request_review
from .escalation import post_missing
from .read import memory_of, pr_state, round_state, settings_of
from .step import escalate

log = structlog.get_logger(__name__)


async def progress_check(rt: Runtime, job: Job) -> None:
    async with rt.step_locks.hold(job.pr_key):
        await _progress_check(rt, job)


async def _progress_check(rt: Runtime, job: Job) -> None:
    attempt = json.loads(job.payload).get("attempt", 0)
    bound = log.bind(pr_key=job.pr_key, process_key=job.process_key, round=job.round_no, job_key=job.key)
    view = await prs.get(rt.db, job.pr_key)
    if view is None:
        return
    pr = view.pr
    if pr.last_progress_job_key == job.key:
        # A redelivery: the stored result stands and nothing is written again.
        bound.info("progress.replayed", result=pr.last_progress_result)
        return
    if pr.process_key != job.process_key or pr.status != Status.CONVERGING or pr.current_round != job.round_no:
        bound.info("progress.not_applicable", status=pr.status, round=pr.current_round)
        return
    rnd = await rounds.get(rt.db, pr.pr_key, pr.process_key, pr.current_round)
    if rnd is None or rnd.attempt != attempt or rnd.status is not None:
        bound.info("progress.other_attempt", attempt=attempt)
        return

    key = parse_pr_key(pr.pr_key)
    try:
        head = await rt.github.branch_head(key.owner, key.repo, pr.head_branch or "")
    except GitHubError as e:
        bound.warning("progress.head_unreadable", error=str(e))
        head = None
    history = tuple(round_state(r) for r in await rounds.history(rt.db, pr.pr_key, pr.process_key)
                    if r.round_no < pr.current_round)
    memory = await memory_of(rt, pr.pr_key)
    outcome = decide_progress(pr_state(pr), round_state(rnd), head, history, settings_of(rt), memory)
    if outcome.kind == "fail_open":
        # Unreadable head: no escalation, no write; the deadline or the poller comes back.
        bound.warning("progress.fail_open")
        return

    now = utcnow()
    n = pr.current_round
    stamp = {"last_progress_job_key": job.key,
             "last_progress_result": json.dumps({"kind": outcome.kind, "reason": outcome.reason, "head": head})}
    # Ownership is re-read inside this single combined write: a straggler of an older run, or a
    # check of an attempt that was superseded, matches no row and writes nothing.
    round_end = {"status": outcome.round_status, "exit_head": outcome.exit_head, "ended_at": now}
    async with rt.db.session() as s:
        if outcome.kind == "advance":
            won = await prs.fenced_update(None, pr.pr_key, pr.process_key, {
                **stamp, "status": Status.WAITING_REVIEW, "current_round": n + 1, "husk_retries": 0,
                "last_round_head": head, "waiting_since": now, "last_nudge_at": now,
                "last_action": f"round {n} addressed ({outcome.reason}); review requested",
            }, expect_status=Status.CONVERGING, expect_round=n, session=s)
            if won:
                await rounds.update_round(s, pr.pr_key, pr.process_key, n, round_end)
                await rounds.start(s, pr.pr_key, pr.process_key, n + 1, head)
        elif outcome.kind == "rerun":
            instructions = json.loads(rnd.instructions or "[]")
            if outcome.instruction:
                instructions.append(outcome.instruction)
            won = await prs.fenced_update(None, pr.pr_key, pr.process_key, {
                **stamp, "husk_retries": pr.husk_retries + (0 if outcome.instruction else 1),
                "last_action": f"round {n} rerun ({outcome.reason})",
            }, expect_status=Status.CONVERGING, expect_round=n, session=s)
            if won:
                next_attempt = await rounds.next_attempt(s, pr.pr_key, pr.process_key, n, {
                    **rounds.VERDICT_FIELDS, "fixer_started_at": now, "instructions": json.dumps(instructions)})
                await queue_fixer(s, rt, pr, n, next_attempt)
        else:
            won = await escalate(rt, pr, outcome.escalation, bound, expect_status=Status.CONVERGING,
                                 extra=stamp, session=s)
            if won:
                await rounds.update_round(s, pr.pr_key, pr.process_key, n, round_end)
    if not won:
        bound.info("progress.lost", kind=outcome.kind)
        return
    bound.info("progress.decided", kind=outcome.kind, reason=outcome.reason, head=head)
    if outcome.kind == "advance":
        await request_review(rt, pr.pr_key)
    elif outcome.kind == "rerun":
        if outcome.remembered is not None:
            await rt.github.comment_once(
                key.owner, key.repo, key.number, f"convergebot:memory:{pr.process_key}:{n}:{attempt}",
                f"convergebot did not ask again: {outcome.remembered.question}\n\n"
                f"Answered from memory: {outcome.instruction}")
        await ask_fixer(rt, pr, n, next_attempt, rnd.findings or "[]", instructions)
    else:
        await post_missing(rt, pr.pr_key)
    await checkrun.publish(rt, pr.pr_key)
