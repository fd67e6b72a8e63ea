"""The progress-check job: after the fixer, did the branch move?"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.engine import check_summary, outbox, repoconfig
from bot.engine.dispatch import queue_fixer
from bot.engine.escalation import escalate
from bot.engine.read import memory_of, pr_state, round_state, settings_of
from bot.github.errors import GitHubError, NotFound, RateLimited, Unavailable
from bot.rules.decide import Progress, decide_progress
from bot.rules.model import Escalate
from bot.runtime.context import Runtime
from storage import prs, rounds
from storage.keys import ProcessKey
from storage.models import Job, PullRequest, Round, utcnow
from storage.statuses import Status

log = structlog.get_logger(__name__)


async def progress_check(rt: Runtime, job: Job) -> None:
    # Behind the PR's step, in this process and across replicas (`Runtime.pr_turn`). The writes
    # below are compare-and-sets that stand alone (docs/guards.md, "kept"): the turn saves a
    # check from reading GitHub while the step is deciding.
    async with rt.pr_turn(prs.pr_key_of(job)):
        await _progress_check(rt, job)


async def _head(rt: Runtime, pr: PullRequest) -> str:
    """The PR's head, from its branch in its own repository, where the fixer pushed it and the
    step reads it: a fork's, for a PR from a fork (the base may even have a branch of the same
    name). From the branch ref, not the PR object: GitHub's `head.sha` lags a push for a while,
    and a check reading it right after the fixer pushed would see no move and escalate.

    A fork's branch is read with the base repository's installation: the fork's account often
    has no installation of the App at all. A fork branch that cannot be read (a private fork,
    or gone) falls back to the PR object's head, as the step does."""
    base = pr.pr_key
    owner, _, repo = (pr.head_repo or base.full_repo).partition("/")
    fork = pr.head_repo is not None and pr.head_repo.lower() != base.full_repo.lower()
    try:
        return await rt.github.repository(owner, repo).branch_head(pr.head_branch or "", via=base.full_repo)
    except NotFound:
        if not fork:
            raise
    found = await rt.github.pr(base).read()
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
    found = await _open_round(rt, job, pk, n, attempt, bound)
    if found is None:
        return
    pr, rnd = found
    head = await _read_head(rt, pr, bound)
    history = tuple(round_state(r) for r in await rounds.history(rt.db, pr.pr_key, pk) if r.round_no < n)
    memory = await memory_of(rt, pr.pr_key)
    settings = settings_of(rt, await repoconfig.effective_config(rt, pr.repo))
    outcome = decide_progress(pr_state(pr), round_state(rnd), head, history, settings, memory)
    decided = _Decided(pr, rnd, pk, n, attempt, head, outcome, utcnow(), job.key)
    if not await _record(rt, decided):
        bound.info("progress.lost", kind=outcome.kind)
        return
    bound.info("progress.decided", kind=outcome.kind, reason=outcome.reason, head=head)
    await check_summary.publish(rt, pr.pr_key)


async def _open_round(rt: Runtime, job: Job, pk: ProcessKey, n: int, attempt: int,
                      bound: Any) -> tuple[PullRequest, Round] | None:
    """The PR's row and the round the job checks, when the check still has a decision to make:
    not a redelivery of one made, not a check of a run or round or attempt gone by."""
    view = await prs.get(rt.db, prs.pr_key_of(job))
    if view is None:
        return None
    pr = view.pr
    if pr.last_progress_job_key == job.key:
        # A redelivery: the stored result stands and nothing is written again. Not a guard
        # (docs/guards.md, "kept"): every decision, and a /retry, changes the status, round or
        # attempt the checks below compare, so a redelivery would stop there anyway.
        bound.info("progress.replayed", result=pr.last_progress_result)
        return None
    # The job's own run, before anything is read: a check of a stopped or superseded run whose
    # old round still looks open would spend GitHub requests on a decision its writes (fenced on
    # the job's run) can only lose.
    if pr.process_key != pk or pr.status != Status.CONVERGING or pr.current_round != n:
        bound.info("progress.not_applicable", status=pr.status, round=pr.current_round)
        return None
    rnd = await rounds.get(rt.db, pr.pr_key, pk, n)
    if rnd is None or rnd.attempt != attempt or rnd.status is not None:
        bound.info("progress.other_attempt", attempt=attempt)
        return None
    return pr, rnd


async def _read_head(rt: Runtime, pr: PullRequest, bound: Any) -> str:
    try:
        return await _head(rt, pr)
    except RateLimited:
        raise  # the job waits in the table for the reset GitHub gave, spending no attempt
    except GitHubError as e:
        # Undecidable now: come back with backoff instead of ending. A check that ended here
        # would leave the round waiting on a fixer that finished long ago.
        bound.warning("progress.head_unreadable", error=str(e))
        raise Unavailable(f"progress-check: head unreadable ({e})") from e


@dataclass(frozen=True)
class _Decided:
    """A check's decision, with what its writes are fenced on: the job's own run, round and
    attempt (never values re-read from the row)."""

    pr: PullRequest
    rnd: Round
    pk: ProcessKey
    n: int
    attempt: int
    head: str
    outcome: Progress
    now: datetime
    job_key: str

    @property
    def stamp(self) -> dict[str, Any]:
        """The row's record of the check: a redelivery of the same job finds it."""
        outcome = self.outcome
        return {"last_progress_job_key": self.job_key,
                "last_progress_result": json.dumps({"kind": outcome.kind, "reason": outcome.reason, "head": self.head})}


FENCE_STATUS = Status.CONVERGING  # the row's status every write of a check expects


async def _record(rt: Runtime, d: _Decided) -> bool:
    """The decision's writes, in one transaction: a straggler of an older run, or a second
    check of the same attempt in another process, matches nothing and the whole decision rolls
    back. Whether it was written."""
    try:
        async with rt.db.session() as s:
            write = {"advance": _advance, "rerun": _rerun}.get(d.outcome.kind, _give_up)
            won = await write(s, rt, d)
            if won and d.outcome.remembered is not None:
                await outbox.comment(
                    s, d.pr.pr_key, f"convergebot:memory:{d.pk}:{d.n}:{d.outcome.remembered.fingerprint}",
                    f"convergebot did not ask again: {d.outcome.remembered.question}\n\n"
                    f"Answered from memory: {d.outcome.instruction}", process_key=d.pk)
            return won
    except _Lost:
        return False


async def _end_round(s: AsyncSession, d: _Decided) -> None:
    round_end = {"status": d.outcome.round_status, "exit_head": d.outcome.exit_head, "ended_at": d.now}
    if not await rounds.update_round(s, d.pr.pr_key, d.pk, d.n, round_end, expect_attempt=d.attempt, open_only=True):
        raise _Lost()


async def _advance(s: AsyncSession, rt: Runtime, d: _Decided) -> bool:
    """The branch moved: the round ends, the next one starts on the new head and asks for its
    review."""
    pr, n, head = d.pr, d.n, d.head
    won = await prs.fenced_update(None, pr.pr_key, d.pk, {
        **d.stamp, "status": Status.WAITING_REVIEW, "current_round": n + 1, "husk_retries": 0,
        # The head just read from the ref is the row's head too: the check run the
        # new round publishes goes on it, not on the head the fixer started from.
        "head_sha": head, "last_round_head": head, "waiting_since": d.now, "last_nudge_at": d.now,
        "last_action": f"round {n} addressed ({d.outcome.reason}); review requested",
    }, expect_status=FENCE_STATUS, expect_round=n, session=s)
    if won:
        await _end_round(s, d)
        await rounds.start(s, pr.pr_key, d.pk, n + 1, head)
        # No review of the new head can be older than its push, which our workspace
        # makes as the fixer's run ends (a push the agent made itself mid-run, if
        # the run went on for minutes after it, is the case this does not bound).
        await outbox.request_review(s, pr.pr_key, d.pk, n + 1, f"start:{head}", head,
                                    pr.last_review_id, reviews_known_at=d.rnd.fixer_finished_at)
    return won


async def _rerun(s: AsyncSession, rt: Runtime, d: _Decided) -> bool:
    """The fixer left nothing to check (a husk): the round runs it again, from the branch as it
    is, with what the check adds to its instructions."""
    pr, rnd, n = d.pr, d.rnd, d.n
    instructions = json.loads(rnd.instructions or "[]")
    if d.outcome.instruction:
        instructions.append(d.outcome.instruction)
    won = await prs.fenced_update(None, pr.pr_key, d.pk, {
        **d.stamp, "husk_retries": pr.husk_retries + 1, "last_round_head": d.head,
        "last_action": f"round {n} rerun ({d.outcome.reason})",
    }, expect_status=FENCE_STATUS, expect_round=n, session=s)
    if won:
        # The rerun starts from the branch as it is: its push lease is this head.
        nxt = await rounds.next_attempt(s, pr.pr_key, d.pk, n, {
            **rounds.VERDICT_FIELDS, "entry_head": d.head, "fixer_started_at": d.now,
            "instructions": json.dumps(instructions)}, expect_attempt=d.attempt)
        if nxt is None:
            raise _Lost()
        await queue_fixer(s, rt, pr, n, nxt, rnd.findings or "[]", instructions, kind=rnd.kind)
    return won


async def _give_up(s: AsyncSession, rt: Runtime, d: _Decided) -> bool:
    """No progress the round can go on from: the maintainers are asked, and the round ends."""
    won = await escalate(s, rt, d.pr, _escalation(d.outcome), extra=d.stamp, process_key=d.pk,
                         expect_status=FENCE_STATUS) is not None
    if won:
        await _end_round(s, d)
    return won
