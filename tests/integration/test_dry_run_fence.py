"""A dry run's record of a claimed job is fenced like every end of a job: only the job claimed,
only by its lease owner, only while it runs."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import update

from bot.engine import outbox
from storage import jobs
from storage.models import Job, utcnow

from ..helpers import enroll

KEY = "acme/w#1"


async def _claimed(db, key: str, owner: str) -> Job:
    await jobs.enqueue(db, "effect", key, pr_key=KEY, payload={"effect": "merge"})
    job = await jobs.claim(db, owner, 300)
    assert job is not None and job.key == key
    return job


async def test_a_worker_whose_lease_was_reclaimed_records_no_dry_run(db):
    """Worker A's lease ran out and worker B claimed the job: A's dry-run record would settle the
    job B is running, and B's own record or end would then find nothing."""
    await enroll(db, KEY)
    stale = await _claimed(db, "merge-1", "worker-a")
    async with db.session() as s:
        await s.exec(update(Job).where(Job.id == stale.id).values(lease_until=utcnow() - timedelta(minutes=1)))
    current = await jobs.claim(db, "worker-b", 300)
    assert current is not None and current.id == stale.id
    assert not await outbox.record_dry_run(db, stale, "merged acme/w#1")
    job = await jobs.get_job(db, stale.id)
    assert (job.status, job.lease_owner, job.last_error) == ("running", "worker-b", None)
    assert await outbox.record_dry_run(db, current, "merged acme/w#1")


async def test_a_job_already_ended_is_not_recorded_as_a_dry_run(db):
    """A job its worker already ended (done, given up) keeps that end: recorded over as a dry
    run, it would show as a write the dry run would have made."""
    await enroll(db, KEY)
    job = await _claimed(db, "merge-1", "worker-a")
    assert await jobs.complete(db, job)
    assert not await outbox.record_dry_run(db, job, "merged acme/w#1")
    assert (await jobs.get_job(db, job.id)).status == "done"


async def test_a_dry_run_record_settles_only_its_own_job_of_an_owner_holding_two(db):
    """Jobs run directly (`Workers.run_one` without an owner) share one owner name: two claimed
    together, the dry run of one leaves the other running."""
    await enroll(db, KEY)
    first = await _claimed(db, "merge-1", "host:1:direct")
    second = await _claimed(db, "merge-2", "host:1:direct")
    assert await outbox.record_dry_run(db, first, "merged acme/w#1")
    assert (await jobs.get_job(db, first.id)).status == outbox.DRY_RUN
    assert (await jobs.get_job(db, second.id)).status == "running"
    assert await jobs.complete(db, second)
