"""submit_pr: the one door every enrollment path goes through."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

import structlog

from bot.engine import outbox
from bot.rules.commands import late_start
from bot.rules.model import DEFAULT_MAX_ROUNDS, title_of
from storage import adjudications, dependencies, escalations, prs, runs
from storage.database import Database
from storage.keys import PrKey, ProcessKey
from storage.locks import KeyedLocks
from storage.models import PullRequest, utcnow
from storage.statuses import RunState, Status

log = structlog.get_logger(__name__)

# In-process: serializes submit_pr per pr_key inside this process. Across processes the
# compare-and-set insert and reopen decide, so a CLI beside `serve` cannot start a second run.
PR_LOCKS = KeyedLocks()


class Outcome(StrEnum):
    STARTED = "started"
    ALREADY_RUNNING = "already_running"
    LATE = "late"  # asked for while a run was active that has ended since: `why` says so


@dataclass(frozen=True)
class SubmitResult:
    outcome: Outcome
    pr_key: PrKey
    process_key: ProcessKey | None
    why: str | None = None


@dataclass(frozen=True)
class SubmitOptions:
    max_rounds: int = DEFAULT_MAX_ROUNDS
    converge_only: bool = False
    submitted_by: str | None = None
    title: str | None = None
    url: str | None = None
    head_branch: str | None = None
    author: str | None = None
    # Enroll only a PR the bot has never had a row for (the repository scan's intent: a PR it
    # knows may have been stopped on purpose). Decided under the PR's lock, and across
    # processes by the insert's compare-and-set.
    only_if_new: bool = False
    # When the intent was expressed (a `/converge` comment's stamp): a run that ended after it
    # was the run it asked for, and a finished PR is not resubmitted for it (None: now).
    asked_at: datetime | None = None
    # Dependencies given with the enrollment (parsed by `explicit_dependencies`), added to the
    # PR's explicit ones in the transaction that starts the run. A submit that starts nothing
    # (already running, late) records none.
    depends_on: tuple[PrKey, ...] = ()


def _new_row(key: PrKey, process_key: ProcessKey, opts: SubmitOptions) -> PullRequest:
    now = utcnow()
    return PullRequest(
        pr_key=key,
        repo=key.full_repo,
        number=key.number,
        url=opts.url or f"https://github.com/{key.full_repo}/pull/{key.number}",
        # Title falls back to the key when GitHub was not reachable; the engine fills it later.
        title=title_of(opts.title) or str(key),
        status=Status.CONVERGING,
        current_round=1,
        process_key=process_key,
        max_rounds=opts.max_rounds,
        converge_only=opts.converge_only,
        head_branch=opts.head_branch,
        author=opts.author,
        submitted_by=opts.submitted_by,
        created_at=now,
        updated_at=now,
    )


def _reopen_options(opts: SubmitOptions) -> dict:
    values = {
        "max_rounds": opts.max_rounds,
        "converge_only": opts.converge_only,
        "submitted_by": opts.submitted_by,
    }
    if title_of(opts.title):
        values["title"] = title_of(opts.title)
    for field in ("url", "head_branch", "author"):
        if getattr(opts, field):
            values[field] = getattr(opts, field)
    return values


async def submit_pr(
    db: Database, key: PrKey, opts: SubmitOptions = SubmitOptions(), *, locks: KeyedLocks = PR_LOCKS
) -> SubmitResult:
    """Enroll or resubmit a PR; idempotent while its run is active."""
    pr_key = key
    bound = log.bind(pr_key=pr_key)
    async with locks.hold(pr_key):
        current = await prs.get(db, pr_key)
        if current is not None and (not current.resubmittable or opts.only_if_new):
            return SubmitResult(Outcome.ALREADY_RUNNING, pr_key, current.pr.process_key)

        if current is None:
            run = runs.new_run(pr_key)
            if await prs.insert_new(db, _new_row(key, run.process_key, opts), run,
                                    also=dependencies.explicit_rows(pr_key, opts.depends_on)):
                bound.info("pr.enrolled", process_key=run.process_key)
                return SubmitResult(Outcome.STARTED, pr_key, run.process_key)
            return await _lost_race(db, pr_key)

        old_key = current.pr.process_key
        if opts.asked_at is not None and (why := await _late(db, current, opts.asked_at)):
            # Decided under the PR's lock on the row as read; across processes the reopen below is
            # a compare-and-set on the old key, so a run started meanwhile is never resubmitted.
            return SubmitResult(Outcome.LATE, pr_key, old_key, why)
        process_key = await _reopen(db, pr_key, old_key, opts)
        if process_key is None:
            return await _lost_race(db, pr_key)
        bound.info("pr.resubmitted", process_key=process_key, previous=old_key)
        return SubmitResult(Outcome.STARTED, pr_key, process_key)


async def _late(db: Database, current: prs.PrView, asked_at: datetime) -> str | None:
    """Why a finished PR asked for at `asked_at` is not resubmitted: its last run ended since."""
    pr = current.pr
    if pr.process_key is None:
        return None  # a row no run ever owned (a crash before its key was published)
    run = await runs.get_run(db, pr.process_key)
    # A row finished without its run's end recorded ended when the row last changed.
    ended = run.ended_at if run is not None and run.ended_at is not None else pr.updated_at
    return late_start(asked_at, ended, current.derived_status)


async def _reopen(db: Database, pr_key: PrKey, old_key: ProcessKey | None, opts: SubmitOptions) -> ProcessKey | None:
    """Move a finished row onto a new run; the run's key, or None if another submitter reopened
    it first (the compare-and-set matched nothing, and nothing is written).

    The new run, the row reopened onto it, what the old run leaves behind and the dependencies
    given commit together, as a first submit's row, run and dependencies do: committed apart, a
    crash between them left a run marked active that no row points at, which nothing would ever
    end."""
    run = runs.new_run(pr_key)
    async with db.session() as s:
        if not await prs.reopen(s, pr_key, old_process_key=old_key, new_process_key=run.process_key,
                                options=_reopen_options(opts)):
            return None
        await runs.record(s, run)
        await escalations.mark_open_stale(s, pr_key)
        await adjudications.invalidate_all(s, pr_key)
        await dependencies.add_explicit(s, pr_key, opts.depends_on)
        if old_key is not None:
            await runs.end_run(None, old_key, RunState.TERMINATED, f"superseded by {run.process_key}", session=s)
    return run.process_key


async def _lost_race(db: Database, pr_key: PrKey) -> SubmitResult:
    now = await prs.get(db, pr_key)
    return SubmitResult(Outcome.ALREADY_RUNNING, pr_key, now.pr.process_key if now else None)


async def abandon_pr(db: Database, pr_key: PrKey, reason: str, *, run: ProcessKey | None = None) -> bool:
    """Abandon the PR's active run (only `run`, if given): the row `abandoned` (fenced on its
    key) and the run terminated in one transaction, so no reader sees one without the other."""
    current = await prs.get(db, pr_key)
    if current is None or current.resubmittable or current.pr.process_key is None:
        return False
    if run is not None and current.pr.process_key != run:
        return False  # a `/converge stop` meant for that run never stops the one after it
    key = current.pr.process_key
    async with db.session() as s:
        won = await prs.fenced_update(None, pr_key, key, {"status": Status.ABANDONED, "outcome": reason}, session=s)
        if won:
            await runs.end_run(None, key, RunState.TERMINATED, reason, session=s)
            await outbox.check_run(s, pr_key)
    return won
