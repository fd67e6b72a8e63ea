"""The job lease fence: a worker whose lease expired and was re-claimed cannot touch the job."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import update

from storage import jobs
from storage.models import Job, utcnow


async def _expire_lease(db, job_id: int) -> None:
    """The lease runs out (the worker stalled past it) without waiting for the clock."""
    async with db.session() as s:
        await s.exec(update(Job).where(Job.id == job_id).values(lease_until=utcnow() - timedelta(minutes=1)))


LATE_WRITES = {
    "complete": lambda db, job: jobs.complete(db, job),
    "fail": lambda db, job: jobs.fail(db, job, "late failure", 0),
    "give_up": lambda db, job: jobs.give_up(db, job, "late give-up"),
    "drop": lambda db, job: jobs.drop(db, job, "late drop"),
    "reschedule": lambda db, job: jobs.reschedule(db, job, utcnow() + timedelta(hours=1), "late hand-back"),
    "renew_lease": lambda db, job: jobs.renew_lease(db, job, 3600),
}


@pytest.mark.parametrize("late", list(LATE_WRITES))
async def test_a_worker_whose_expired_lease_was_reclaimed_cannot_finish_the_job(db, late):
    job_id, _ = await jobs.enqueue(db, "sync", "sync:acme/w#1:d1", pr_key="acme/w#1")
    stale = await jobs.claim(db, "worker-a", lease_seconds=60)
    assert stale is not None and stale.id == job_id
    await _expire_lease(db, job_id)
    current = await jobs.claim(db, "worker-b", lease_seconds=60)
    assert current is not None and current.id == job_id and current.attempts == 2

    # Worker A wakes up and reports on the job worker B now runs: it must write nothing.
    assert not await LATE_WRITES[late](db, stale)
    job = await jobs.get_job(db, job_id)
    assert (job.status, job.lease_owner, job.attempts, job.last_error, job.finished_at) == (
        "running", "worker-b", 2, None, None)
    assert job.lease_until == current.lease_until

    # Worker B's own outcome stands.
    assert await jobs.complete(db, current)
    job = await jobs.get_job(db, job_id)
    assert (job.status, job.lease_owner) == ("done", "worker-b")
