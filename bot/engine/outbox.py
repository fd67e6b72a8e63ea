"""The outbox: every GitHub write is a durable effect, recorded in the decision's transaction.

An effect is a row of the jobs table (kind `effect`), written in the same transaction as the
state change that decides it, with an idempotency key, and run by the job workers with retries
and backoff (`bot/effects/runner.py`). A crash after the commit cannot lose the write, and a crash
before it cannot make a write nobody decided. Each effect is also idempotent against GitHub
itself: its handler first looks for what a lost answer may already have made.

See docs/architecture.md ("The outbox").
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, func, update
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from bot.rules.model import Finding
from storage import jobs
from storage.backup import Restored
from storage.keys import PrKey, ProcessKey
from storage.models import Job, utcnow
from storage.statements import on_postgres
from storage.statuses import JobKind

KIND = JobKind.EFFECT
# An effect keeps trying through a long GitHub outage (capped backoff) rather than giving up:
# a write that was decided must happen, and the liveness watchdog catches the rest.
MAX_ATTEMPTS = 40

# How long a check-run update of a run's end (merged, abandoned) waits for the row's next change
# to fold in; a step's update waits `[github] check_run_settle_seconds`.
CHECK_RUN_SETTLE_SECONDS = 1.0

# Effects that write comments (the per-PR comment budget counts these).
COMMENT_EFFECTS = frozenset({"comment", "reply"})

# The state of an effect (or a fix job) recorded in a dry run and not performed: terminal, like
# `done`, so nothing waits on it, but never counted as a write made.
DRY_RUN = "dry_run"


async def add(
    session: AsyncSession, effect: str, key: str, *, pr_key: PrKey, process_key: ProcessKey | None = None,
    delay_seconds: float = 0.0, **payload: Any,
) -> bool:
    """Record one effect in the caller's transaction; False if its key was recorded before.

    `process_key` ties the effect to a run: the worker drops it if that run stopped meanwhile.
    Effects that describe a state (the check run) or answer a person (command reactions) carry
    none, so they happen even once the run has ended.
    """
    _, created = await jobs.enqueue_in(
        session, on_postgres(session), KIND, f"{effect_key_prefix(effect)}{key}", pr_key=pr_key,
        process_key=process_key, payload={"effect": effect, **payload}, max_attempts=MAX_ATTEMPTS,
        delay_seconds=delay_seconds,
    )
    return created


def effect_key_prefix(effect: str) -> str:
    """What the job key of every effect of this kind starts with."""
    return f"fx:{effect}:"


def _effects() -> tuple:
    """The where-clauses for the PR's effect jobs of one kind, bound by `_of`: the hot queries
    below are built once (building one cost more than running it)."""
    return Job.kind == KIND, Job.pr_key == bindparam("fx_pr_key"), col(Job.payload).contains(bindparam("fx_effect"))


def _of(pr_key: PrKey, effect: str) -> dict[str, str]:
    return {"fx_pr_key": pr_key, "fx_effect": f'"effect": "{effect}"'}


_NEXT_DUE = select(func.min(Job.run_at)).where(
    *_effects(), col(Job.status).in_((jobs.JobStatus.QUEUED, jobs.JobStatus.RUNNING)))
# Locked (PostgreSQL): see `check_run`.
_WAITING_UPDATE = select(Job.id).where(*_effects(), Job.status == jobs.JobStatus.QUEUED).limit(1).with_for_update()


async def next_due(db, pr_key: PrKey, effect: str) -> datetime | None:
    """When the PR's earliest effect of this kind still to be done (queued or running) is due (a
    running one: its past start), or None when none is waiting."""
    async with db.read_session() as s:
        return (await s.exec(_NEXT_DUE, params=_of(pr_key, effect))).one()


async def count(db, pr_key: PrKey, effect: str, process_key: ProcessKey, since: datetime | None = None) -> int:
    """How many effects of this kind the run queued for the PR (after `since`), whatever became
    of them."""
    conds = [*_effects(), Job.process_key == process_key]
    if since is not None:
        conds.append(Job.created_at > since)
    async with db.read_session() as s:
        return (await s.exec(select(func.count()).select_from(Job).where(*conds), params=_of(pr_key, effect))).one()


async def queued_since(db, pr_key: PrKey, effect: str, since: datetime, *, besides: int | None) -> bool:
    """Whether an effect of this kind for the PR, other than the job `besides`, was queued at
    or after `since` (whatever became of it)."""
    async with db.read_session() as s:
        return (await s.exec(select(Job.id).where(
            *_effects(), Job.id != besides, Job.created_at >= since).limit(1), params=_of(pr_key, effect))).first() is not None


async def pending(db, pr_key: PrKey, effect: str, *, dry_run: bool = False) -> bool:
    """Whether an effect of this kind is still to be done (queued or running) for the PR, or,
    in a dry run, was recorded as one: a dry-run merge holds `merging` ("would merge"), where a
    step finding no merge pending would decide the merge again, and again. (A real run never
    meets dry-run rows: `serve` refuses their database, so it makes no read for them.)"""
    if await next_due(db, pr_key, effect) is not None:
        return True
    if not dry_run:
        return False
    async with db.read_session() as s:
        return (await s.exec(select(Job.id).where(*_effects(), Job.status == DRY_RUN).limit(1),
                             params=_of(pr_key, effect))).first() is not None


async def record_dry_run(db, job: Job, summary: str) -> bool:
    """Settle a claimed job as `dry_run`, with what it would have done, instead of running it.

    Fenced like every transition after a claim (the worker's lease): a worker whose lease was
    lost records nothing. The worker's own `complete` after it then matches no row.
    """
    async with db.session() as s:
        return (await s.exec(update(Job).where(
            col(Job.id) == job.id, col(Job.lease_owner) == job.lease_owner, col(Job.status) == jobs.JobStatus.RUNNING,
        ).values(status=DRY_RUN, finished_at=utcnow(), lease_until=None,
                 last_error=f"dry run: would have {summary}"))).rowcount == 1


def describe(effect: str, payload: dict, reviewers: Sequence[Any] = ()) -> str:
    """What an effect would do, in a few words for people (the dry run's record and log).
    `reviewers`: the configured ones (bot/rules/reviewers.py `Reviewer`s, or logins)."""
    p = payload
    if effect == "request_review":
        head = (p.get("head") or "")[:7] or "the head"
        asked = [r if isinstance(r, str) else f"{r.login} ({r.kind})" for r in reviewers
                 if isinstance(r, str) or r.kind != "automatic"]
        return f"requested a review of {head} from {', '.join(asked) or 'the configured reviewers'}"
    if effect == "comment":
        first = (p.get("body") or "").strip().splitlines()[:1]
        return f"posted a comment: {first[0][:120] if first else '(empty)'}"
    if effect == "reply":
        items = p["replies"] if "replies" in p else [p]
        resolved = sum(1 for i in items if i.get("resolve"))
        return f"replied on {len(items)} review thread(s), resolving {resolved}"
    if effect == "react":
        return f"reacted {p.get('content')} to comment {p.get('comment_id')}"
    if effect == "check_run":
        return "updated the convergebot check run"
    if effect == "update_branch":
        return f"updated the branch from its base (head {(p.get('expected_head') or '')[:7]})"
    if effect == "merge":
        return f"merged at {(p.get('sha') or '')[:7]}"
    if effect == "restack":
        return f"retargeted the PR off {p.get('parent')} (landed) and re-based its own commits onto the new base"
    return f"made the {effect} write"


# -- the effects, one builder each ----------------------------------------------------------


async def request_review(session: AsyncSession, pr_key: PrKey, process_key: ProcessKey, round_no: int, why: str,
                         head: str | None, baseline: int | None, *, reviews_known_at: datetime | None = None,
                         nudge: bool = False) -> bool:
    """Ask the configured reviewers for a review of `head`, each its way (bot/rules/reviewers.py);
    `baseline` is the newest review id the decision knew of (a review after it answers this
    request). `reviews_known_at`: the time up to which no review of `head` the decision did not
    know of can exist (it read the reviews then, or `head` was pushed then); None when the
    decision cannot say. A `nudge` asks again those asked through GitHub's review requests; a
    bot asked by comment is asked once a round (its trigger is not posted again)."""
    return await add(session, "request_review", f"{process_key}:{round_no}:{why}", pr_key=pr_key,
                     process_key=process_key, head=head, baseline=baseline, round=round_no, nudge=nudge,
                     reviews_known_at=reviews_known_at.isoformat() if reviews_known_at else None)


async def comment(session: AsyncSession, pr_key: PrKey, marker: str, body: str, *,
                  process_key: ProcessKey | None = None, escalation_id: int | None = None) -> bool:
    """An issue comment carrying the hidden `marker`, posted at most once per marker."""
    return await add(session, "comment", marker, pr_key=pr_key, process_key=process_key, marker=marker,
                     body=body, escalation_id=escalation_id)


def reply_marker(thread_id: str) -> str:
    """The hidden mark of our reply on a review thread: a thread carrying it is answered."""
    return f"<!-- convergebot:reply:{thread_id} -->"


async def replies(session: AsyncSession, pr_key: PrKey, process_key: ProcessKey,
                  items: Sequence[tuple[Finding, str, bool]], *, key: str, round_no: int) -> bool:
    """Reply on each finding's review thread (once per thread), resolving those asked
    (`(finding, text, resolve)`) in round `round_no`: one effect, so at most one read of the
    threads and one GraphQL write for them all. Each entry carries whether our reply was on its
    thread when the round read it (`answered`, see `bot/effects/replies.py`). Findings without a
    thread are left out; False if none is left. A reply names its thread alone: a thread whose
    first comment GitHub sent no id for still gets its reply and resolve (our marker, keyed by
    the thread, keeps it to one), or it would stay open, a finding again next round."""
    entries = [{"thread_id": f.thread_id, "text": text, "resolve": resolve, "answered": f.answered}
               for f, text, resolve in items if f.thread_id]
    if not entries:
        return False
    return await add(session, "reply", f"{process_key}:{key}", pr_key=pr_key, process_key=process_key,
                     replies=entries, round=round_no)


async def react(session: AsyncSession, pr_key: PrKey, comment_id: int, content: str, *, review_comment: bool) -> bool:
    return await add(session, "react", f"{comment_id}:{content}", pr_key=pr_key, comment_id=comment_id,
                     content=content, review_comment=review_comment)


async def merge(session: AsyncSession, pr_key: PrKey, process_key: ProcessKey, sha: str, round_no: int) -> bool:
    return await add(session, "merge", f"{process_key}:{round_no}:{sha}:{utcnow().isoformat()}",
                     pr_key=pr_key, process_key=process_key, sha=sha)


async def update_branch(session: AsyncSession, pr_key: PrKey, process_key: ProcessKey, expected_head: str) -> bool:
    return await add(session, "update_branch", f"{process_key}:{expected_head}", pr_key=pr_key,
                     process_key=process_key, expected_head=expected_head)


async def restack(session: AsyncSession, pr_key: PrKey, process_key: ProcessKey, parent: PrKey, head: str) -> bool:
    """Retarget a stacked PR off its landed `parent` and replay its own commits (docs/stacks.md):
    once per parent and head (a head that moves since is the merge stage's to decide on again)."""
    return await add(session, "restack", f"{process_key}:{parent}:{head}", pr_key=pr_key,
                     process_key=process_key, parent=str(parent))


async def check_run(session: AsyncSession, pr_key: PrKey, settle_seconds: float = CHECK_RUN_SETTLE_SECONDS) -> bool:
    """Bring the `convergebot` check run up to date with the row; one waiting update per PR.

    The handler renders from the row when it runs, so a queued update already covers any later
    change and a second one would only repeat it. It waits `settle_seconds` first: stages that
    follow each other within it (converged, waiting for dependencies, for the merge, merging,
    merged; a fixer that pushes within seconds) then cost one update instead of one each.

    A waiting update that a hold put off (`check_run.hold`: for as long again as it had waited)
    is brought forward to the settle window: the PR's stage changed, and the hold may be over
    (a fixer pushed: the new head's run is due now, not when the hold would have looked again).
    """
    # Locked (PostgreSQL): a worker claiming the waiting update while this transaction is open
    # would render the row without this transaction's change, and this one would add none. It
    # skips the locked job until this commits, or, claimed first, the job is no longer waiting.
    waiting = (await session.exec(_WAITING_UPDATE, params=_of(pr_key, "check_run"))).first()
    if waiting is not None:
        await jobs.bring_forward(session, waiting, utcnow() + timedelta(seconds=settle_seconds))
        return False
    return await add(session, "check_run", f"{pr_key}:{utcnow().isoformat()}", pr_key=pr_key,
                     delay_seconds=settle_seconds)


class Memory:
    """Whether what the database remembers of GitHub's writes can be trusted to skip a look.

    Not for a job decided before this process began: another process may have tried it and its
    record of the try be lost with it, as in a database restored from a backup, which holds jobs
    as queued that a later process ran. Nor at all on a restored backup (`storage/backup.py`)
    until every run active at the restore has moved past it (the poller asks, and then moves
    `since` to that moment: a job decided from the restored memory still looks): GitHub may hold
    reviews asked, replies posted and check runs made after the backup was taken."""

    def __init__(self) -> None:
        self.since = utcnow()
        self.restore: Restored | None = None  # the backup this database was restored from

    @property
    def restored(self) -> bool:
        return self.restore is not None


MEMORY = Memory()


def first_try(job: Job) -> bool:
    """Whether no earlier try of this job can have written anything: its first claim, never
    failed, cancelled or put off (a reschedule gives the attempt back but records why), of a job
    this process decided, on a database whose memory holds (`Memory`)."""
    return (job.attempts <= 1 and job.last_error is None
            and job.created_at is not None and job.created_at >= MEMORY.since
            and not MEMORY.restored)
