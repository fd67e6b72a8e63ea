"""The liveness watchdog: every active PR has a pending job or a dated wait, or it is healed.

The poller runs it each cycle. Its only real case is a round whose fixer was dispatched and
that no job will ever close (every check of it gave up): the poller's own sync cannot move such
a round, since the step waits for the fixer. It is a safety net, not the mechanism: healing is
logged and counted (`convergebot_liveness_healed_total`), and the chaos suite asserts it never
happens in its normal course.
"""

from __future__ import annotations

import structlog
from sqlmodel import col, select

from bot import metrics
from bot.engine.dispatch import queue_progress
from bot.runtime.context import Runtime
from storage import jobs, prs, rounds
from storage.keys import PrKey, ProcessKey
from storage.models import Job, utcnow
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
    """Heal the active PRs that nothing will move; returns how many were healed.

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
