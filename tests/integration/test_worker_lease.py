"""A job whose lease another worker took over is cancelled, and its worker goes on."""

from __future__ import annotations

import asyncio

from sqlalchemy import update

from bot.runtime.workers import PoolSettings, WorkerPool
from storage import jobs
from storage.models import Job, utcnow

# A short lease, so the heartbeat (every third of it) looks often; nothing here waits for it to
# run out: the test expires it by hand.
SETTINGS = PoolSettings(workers=1, lease_seconds=0.6, idle_poll_seconds=0.05)
DEADLINE = 10.0  # seconds; the heartbeat notices within 0.2 s


class _Handler:
    """Waits to be released, then does its side effect; records whether it was cancelled."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.finished = asyncio.Event()
        self.effects: list[int] = []

    async def __call__(self, job: Job) -> None:
        self.started.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        finally:
            self.finished.set()
        self.effects.append(job.id)


async def _steal(db, job_id: int) -> Job:
    """What a second worker does once the first one's lease ran out: claim the job itself."""
    async with db.session() as s:
        await s.exec(update(Job).where(Job.id == job_id).values(lease_until=utcnow()))
    thief = await jobs.claim(db, "thief", lease_seconds=60)
    assert thief is not None and thief.id == job_id
    return thief


async def _within_deadline(event: asyncio.Event) -> bool:
    try:
        await asyncio.wait_for(event.wait(), DEADLINE)
    except TimeoutError:
        return False
    return True


async def test_a_job_whose_lease_was_taken_over_is_cancelled_before_its_side_effect(db):
    handler = _Handler()
    job_id, _ = await jobs.enqueue(db, "fix", "fix:1")
    pool = WorkerPool(db, {"fix": handler}, SETTINGS)
    pool.start()
    try:
        assert await _within_deadline(handler.started)
        await _steal(db, job_id)

        cancelled = await _within_deadline(handler.cancelled)
        # Whatever happened, let a handler that was not stopped go on: it then acts.
        handler.release.set()
        assert await _within_deadline(handler.finished)
        assert cancelled, "the old runner went on after another worker took the job over"
        assert handler.effects == []
        # The cancelled runner's hand-back did not touch the new owner's claim.
        row = await jobs.get_job(db, job_id)
        assert (row.status, row.lease_owner, row.attempts) == ("running", "thief", 2)
    finally:
        await pool.stop()


async def test_the_worker_goes_on_after_its_job_was_cancelled_for_a_lost_lease(db):
    handler = _Handler()
    ran = asyncio.Event()

    async def next_job(job: Job) -> None:
        ran.set()

    job_id, _ = await jobs.enqueue(db, "fix", "fix:1")
    pool = WorkerPool(db, {"fix": handler, "sync": next_job}, SETTINGS)
    pool.start()
    try:
        assert await _within_deadline(handler.started)
        await _steal(db, job_id)
        assert await _within_deadline(handler.cancelled)
        # The pool's only worker runs the next job: the cancel stopped the job, not the worker.
        await jobs.enqueue(db, "sync", "sync:1")
        pool.wake()
        assert await _within_deadline(ran), "the worker died with its cancelled job"
        assert await _within_deadline(handler.finished)
        assert handler.effects == []
    finally:
        await pool.stop()
