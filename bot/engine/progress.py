"""The progress-check job: after the fixer, did the branch move?"""

from __future__ import annotations

import json
from typing import Any

import structlog

from bot.effects import outbox
from bot.engine import checkrun, repoconfig
from bot.engine.dispatch import queue_fixer
from bot.engine.escalation import escalate
from bot.engine.read import memory_of, pr_state, round_state, settings_of
from bot.github.errors import GitHubError, NotFound, RateLimited, Unavailable
from bot.prkey import parse_pr_key
from bot.rules.decide import Progress, decide_progress
from bot.rules.model import Escalate
from bot.runtime.context import Runtime
from storage import prs, rounds
from storage.models import Job, utcnow
from storage.statuses import Status

log = structlog.get_logger(__name__)


async def progress_check(rt: Runtime, job: Job) -> None:
    # Behind the PR's step, in this process and across replicas (`Runtime.pr_turn`). The writes
    # below are compare-and-sets that stand alone (docs/guards.md, "kept"): the turn saves a
    # check from reading GitHub while the step is deciding.
    async with rt.pr_turn(prs.pr_key_of(job)):
        await _progress_check(rt, job)


async def _head(rt: Runtime, pr) -> str:
    """The PR's head, from its branch in its own repository, where the fixer pushed it and the
    step reads it: a fork's, for a PR from a fork (the base may even have a branch of the same
    name). From the branch ref, not the PR object: GitHub's `head.sha` lags a push for a while,
    and a check reading it right after the fixer pushed would see no move and escalate.

    A fork's branch is read with the base repository's installation: the fork's account often
    has no installation of the App at all. A fork branch that cannot be read (a private fork,
    or gone) falls back to the PR object's head, as the step does."""
    base = parse_pr_key(pr.pr_key)
    owner, _, repo = (pr.head_repo or base.full_repo).partition("/")
    fork = pr.head_repo is not None and pr.head_repo.lower() != base.full_repo.lower()
    try:
        return await rt.github.branch_head(owner, repo, pr.head_branch or "", via=base.full_repo)
    except NotFound:
        if not fork:
            raise
    found = await rt.github.pull(base.owner, base.repo, base.number)
    log.info("progress.fork_head_from_pr", pr_key=pr.pr_key, head_repo=pr.head_repo)
    return str(found["head"]["sha"])


def _escalation(outcome: Progress) -> Escalate:
    """The question of an outcome that is neither `advance` nor `rerun`: an `escalate` always
    names one (the other, `fail_open`, is for a head unread, and `_head` raises instead)."""
    if outcome.escalation is None:
        raise ValueError(f"progress-check: a {outcome.kind!r} outcome names no escalation")
    return outcome.escalation


class _Lost(Exception):
    """The decision's round write lost its fence: the whole transaction rolls back."""


async def _progress_check(rt: Runtime, job: Job) -> None:
    attempt = json.loads(job.payload).get("attempt", 0)
    # A check is its run's, of one round (`dispatch.queue_progress`).
    pk, n = prs.process_key_of(job), prs.round_of(job)
    bound = log.bind(pr_key=job.pr_key, process_key=pk, round=n, job_key=job.key)
    view = await prs.get(rt.db, prs.pr_key_of(job))
    if view is None:
        return
    pr = view.pr
    if pr.last_progress_job_key == job.key:
        # A redelivery: the stored result stands and nothing is written again. Not a guard
        # (docs/guards.md, "kept"): every decision, and a /retry, changes the status, round or
        # attempt the checks below compare, so a redelivery would stop there anyway.
        bound.info("progress.replayed", result=pr.last_progress_result)
        return
    # The job's own run, before anything is read: a check of a stopped or superseded run whose
    # old round still looks open would spend GitHub requests on a decision its writes (fenced on
    # the job's run) can only lose.
    if pr.process_key != pk or pr.status != Status.CONVERGING or pr.current_round != n:
        bound.info("progress.not_applicable", status=pr.status, round=pr.current_round)
        return
    rnd = await rounds.get(rt.db, pr.pr_key, pk, n)
    if rnd is None or rnd.attempt != attempt or rnd.status is not None:
        bound.info("progress.other_attempt", attempt=attempt)
        return

    try:
        head = await _head(rt, pr)
    except RateLimited:
        raise  # the job waits in the table for the reset GitHub gave, spending no attempt
    except GitHubError as e:
        # Undecidable now: come back with backoff instead of ending. A check that ended here
        # would leave the round waiting on a fixer that finished long ago.
        bound.warning("progress.head_unreadable", error=str(e))
        raise Unavailable(f"progress-check: head unreadable ({e})") from e
    history = tuple(round_state(r) for r in await rounds.history(rt.db, pr.pr_key, pk) if r.round_no < n)
    memory = await memory_of(rt, pr.pr_key)
    settings = settings_of(rt, await repoconfig.effective_config(rt, pr.repo))
    outcome = decide_progress(pr_state(pr), round_state(rnd), head, history, settings, memory)

    now = utcnow()
    stamp = {"last_progress_job_key": job.key,
             "last_progress_result": json.dumps({"kind": outcome.kind, "reason": outcome.reason, "head": head})}
    # One transaction, fenced on the job's own run, round and attempt (never on values re-read
    # from the row): a straggler of an older run, or a second check of the same attempt in
    # another process, matches nothing and the whole decision rolls back.
    round_end = {"status": outcome.round_status, "exit_head": outcome.exit_head, "ended_at": now}
    fence: dict[str, Any] = dict(expect_status=Status.CONVERGING, expect_round=n)

    async def end_round(s) -> None:
        if not await rounds.update_round(s, pr.pr_key, pk, n, round_end, expect_attempt=attempt, open_only=True):
            raise _Lost()

    try:
        async with rt.db.session() as s:
            if outcome.kind == "advance":
                won = await prs.fenced_update(None, pr.pr_key, pk, {
                    **stamp, "status": Status.WAITING_REVIEW, "current_round": n + 1, "husk_retries": 0,
                    # The head just read from the ref is the row's head too: the check run the
                    # new round publishes goes on it, not on the head the fixer started from.
                    "head_sha": head, "last_round_head": head, "waiting_since": now, "last_nudge_at": now,
                    "last_action": f"round {n} addressed ({outcome.reason}); review requested",
                }, **fence, session=s)
                if won:
                    await end_round(s)
                    await rounds.start(s, pr.pr_key, pk, n + 1, head)
                    # No review of the new head can be older than its push, which our workspace
                    # makes as the fixer's run ends (a push the agent made itself mid-run, if
                    # the run went on for minutes after it, is the case this does not bound).
                    await outbox.request_review(s, pr.pr_key, pk, n + 1, f"start:{head}", head,
                                                pr.last_review_id, reviews_known_at=rnd.fixer_finished_at)
            elif outcome.kind == "rerun":
                instructions = json.loads(rnd.instructions or "[]")
                if outcome.instruction:
                    instructions.append(outcome.instruction)
                won = await prs.fenced_update(None, pr.pr_key, pk, {
                    **stamp, "husk_retries": pr.husk_retries + 1, "last_round_head": head,
                    "last_action": f"round {n} rerun ({outcome.reason})",
                }, **fence, session=s)
                if won:
                    # The rerun starts from the branch as it is: its push lease is this head.
                    nxt = await rounds.next_attempt(s, pr.pr_key, pk, n, {
                        **rounds.VERDICT_FIELDS, "entry_head": head, "fixer_started_at": now,
                        "instructions": json.dumps(instructions)}, expect_attempt=attempt)
                    if nxt is None:
                        raise _Lost()
                    await queue_fixer(s, rt, pr, n, nxt, rnd.findings or "[]", instructions, kind=rnd.kind)
            else:
                won = await escalate(s, rt, pr, _escalation(outcome), extra=stamp, process_key=pk,
                                     expect_status=Status.CONVERGING) is not None
                if won:
                    await end_round(s)
            if won and outcome.remembered is not None:
                await outbox.comment(
                    s, pr.pr_key, f"convergebot:memory:{pk}:{n}:{outcome.remembered.fingerprint}",
                    f"convergebot did not ask again: {outcome.remembered.question}\n\n"
                    f"Answered from memory: {outcome.instruction}", process_key=pk)
    except _Lost:
        won = False
    if not won:
        bound.info("progress.lost", kind=outcome.kind)
        return
    bound.info("progress.decided", kind=outcome.kind, reason=outcome.reason, head=head)
    await checkrun.publish(rt, pr.pr_key)
