"""The liveness watchdog: every active PR has a pending job, or a dated wait whose date has not
passed by more than a poll interval; else it is healed.

The poller runs it each cycle. Its two cases: a round whose fixer was dispatched and that no job
will ever close (every check of it gave up), which the poller's own sync cannot move, since the
step waits for the fixer; and a wait the bot ends by itself (a review's or the checks' timeout,
mergeability's) still open an interval past its date with no job to end it, which a sync does.
It is a safety net, not the mechanism: healing is logged and counted
(`convergebot_liveness_healed_total`), and the chaos suite asserts it never happens in its
normal course.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import structlog
from sqlmodel import col, select

from bot import metrics
from bot.engine import repoconfig
from bot.engine.dispatch import queue_progress, requeue
from bot.engine.read import settings_of
from bot.rules.decide import review_wait_limit
from bot.rules.waiting import Limits, Waiting, ends_by, waiting
from bot.runtime.context import Runtime
from storage import jobs, prs, rounds
from storage.keys import PrKey, ProcessKey
from storage.models import Job, utcnow
from storage.prs import PrView
from storage.statuses import JobKind, Status

log = structlog.get_logger(__name__)

CLOSERS = (JobKind.FIX, JobKind.PROGRESS_CHECK)


async def _pending_rounds(rt: Runtime) -> set[tuple[str, str, int]]:
    """(pr_key, process_key, round) of every fix or progress-check job still to run (a few: one
    per round at work, whatever the number of enrolled PRs)."""
    query = select(Job.pr_key, Job.process_key, Job.round_no).where(
        col(Job.kind).in_(CLOSERS), col(Job.status).in_((jobs.JobStatus.QUEUED, jobs.JobStatus.RUNNING)))
    async with rt.db.read_session() as s:
        # Each job carries all three (`dispatch`); one lacking any would match no PR's round.
        return {(k, pk, n) for k, pk, n in await s.exec(query)
                if k is not None and pk is not None and n is not None}


async def _fixer_at_work(rt: Runtime, keys: list[PrKey]) -> list[tuple[PrKey, ProcessKey, int, int]]:
    """(pr_key, process_key, round, attempt) of rounds waiting on a dispatched fixer."""
    pr_keys = set(keys)
    at = [(v.pr.pr_key, v.pr.process_key, v.pr.current_round) for v in await prs.list_all(rt.db, active_only=True)
          if v.pr.pr_key in pr_keys and v.pr.status == Status.CONVERGING and v.pr.process_key is not None]
    in_flight = await rounds.fixers_in_flight(rt.db, at)
    return [(*run, in_flight[run]) for run in at if run in in_flight]


async def check(rt: Runtime, active: list[PrKey]) -> int:
    """Heal the active PRs that nothing will move; returns how many were healed."""
    return await _stuck_rounds(rt, active) + await _overdue_waits(rt, active)


async def _stuck_rounds(rt: Runtime, active: list[PrKey]) -> int:
    """Give a progress check to each round waiting on a fixer with no job left to close it.

    Jobs are read before rounds, and a suspect is confirmed by reading both again: a round that
    was dispatched between the two reads is not mistaken for a stuck one.
    """
    pending = await _pending_rounds(rt)
    suspects = [s for s in await _fixer_at_work(rt, active) if s[:3] not in pending]
    if not suspects:
        return 0
    pending = await _pending_rounds(rt)
    confirmed = await _fixer_at_work(rt, [s[0] for s in suspects])
    healed = 0
    for pr_key, pk, n, attempt in confirmed:
        if (pr_key, pk, n) in pending or (pr_key, pk, n, attempt) not in suspects:
            continue
        async with rt.db.session() as s:
            await queue_progress(s, pr_key, pk, n, attempt, f"watchdog:{utcnow().isoformat()}")
        metrics.LIVENESS_HEALED.inc()
        log.warning("liveness.healed", pr_key=pr_key, process_key=pk, round=n, attempt=attempt,
                    why="a dispatched fixer with no job left to close its round")
        healed += 1
    return healed


def _limits(rt: Runtime, repo: str) -> Limits:
    """The repository's limits, as this process last read its settings (the step reads them)."""
    settings = settings_of(rt, repoconfig.current(rt, repo).config)
    return Limits(review=review_wait_limit(settings), checks=settings.checks_timeout,
                  mergeability=timedelta(seconds=rt.config.merge.mergeability_timeout_seconds))


def _overdue(rt: Runtime, views: list[PrView]) -> dict[PrKey, tuple[Waiting, datetime]]:
    """The PRs whose wait's date passed more than a poll interval ago: the wait and its date.

    No round is read: only a converging PR's wait reads it, and neither of those (the bot's, a
    fixer's) has a date here."""
    now, grace = utcnow(), timedelta(seconds=rt.config.poller.interval_seconds)
    limits: dict[str, Limits] = {}
    out = {}
    for view in views:
        wait = waiting(view.derived_status, view.pr, None)
        if wait is None:
            continue
        repo = view.pr.repo.lower()
        until = ends_by(view.derived_status, wait, limits.get(repo) or limits.setdefault(repo, _limits(rt, repo)))
        if until is not None and now - until > grace:
            out[view.pr.pr_key] = (wait, until)
    return out


async def _overdue_waits(rt: Runtime, active: list[PrKey]) -> int:
    """Re-read (a sync) each PR whose wait is overdue with no job queued or running to end it.

    A suspect's jobs are read before its row is read again: a step that ran in between, and
    ended the wait, shows in the row."""
    wanted = set(active)
    suspects = _overdue(rt, [v for v in await prs.list_all(rt.db, active_only=True) if v.pr.pr_key in wanted])
    healed = 0
    for pr_key, (_, until) in suspects.items():
        if await jobs.in_hand(rt.db, pr_key):
            continue
        view = await prs.get(rt.db, pr_key)
        confirmed = _overdue(rt, [view]).get(pr_key) if view is not None else None
        if confirmed is None or confirmed[1] != until:
            continue
        async with rt.db.session() as s:
            await requeue(s, pr_key, "watchdog")
        metrics.LIVENESS_HEALED.inc()
        log.warning("liveness.healed", pr_key=pr_key, waiting_on=confirmed[0].text, until=until.isoformat(),
                    why="a wait past its date by over a poll interval, with no job to end it")
        healed += 1
    return healed
