"""A check-run update of a PR on its way to the merge waits while other work of the PR is in
hand (`check_run.hold`): only work due within the settle window counts. Work put off further (a
sync rescheduled past a rate limit, an hour out) would hold the update for the whole hold, five
minutes by default, and the check run would show a stage the PR has left."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import update
from sqlmodel import select

from bot.effects import check_run
from bot.engine import outbox
from bot.runtime.workers import Reschedule
from storage import jobs
from storage.models import Job, PullRequest, utcnow

from .harness import bot_on_simulator, open_and_enroll, quiesce


async def _put_off_and_idle(h, key: str) -> bool:
    """The PR's queued jobs put off an hour; whether none of them is running."""
    async with h.rt.db.session() as s:
        await s.exec(update(Job).where(Job.pr_key == key, Job.status == "queued").values(
            run_at=utcnow() + timedelta(hours=1)))
        return not (await s.exec(select(Job.id).where(Job.pr_key == key, Job.status == "running"))).all()


async def _running_elsewhere(h, job_id: int) -> None:
    """The job under way on "another worker": none of this process's workers runs it."""
    async with h.rt.db.session() as s:
        await s.exec(update(Job).where(Job.id == job_id).values(
            status="running", lease_owner="elsewhere", lease_until=utcnow() + timedelta(hours=1)))


async def test_an_update_is_held_only_by_work_due_within_the_settle_window(tmp_path, db_url):
    # No poll ticks: each would queue the PR's sync.
    async with bot_on_simulator(tmp_path, db_url, poller={"interval_seconds": 3600}) as h:
        key, _ = await open_and_enroll(h)  # no reviewer: the PR waits for a review
        await h.wait_status(key, "waiting_review")
        await quiesce(h)
        await h.wait_for("the PR's own work put off or ended", lambda: _put_off_and_idle(h, key))
        # On the way to the merge (what holds an update), and an update under way "elsewhere".
        async with h.rt.db.session() as s:
            await s.exec(update(PullRequest).where(PullRequest.pr_key == key).values(status="waiting_merge"))
            await outbox.add(s, "check_run", f"{key}:mine", pr_key=key, delay_seconds=3600)
        [mine] = [j for j in await jobs.list_jobs(h.rt.db, key) if j.key == f"fx:check_run:{key}:mine"]
        await _running_elsewhere(h, mine.id)
        mine = await jobs.get_job(h.rt.db, mine.id)

        # A sync of the PR put off for an hour: not in hand, the update goes out.
        sync_id, _ = await jobs.enqueue(h.rt.db, "sync", f"sync:{key}:later", pr_key=key, delay_seconds=3600)
        assert await check_run.hold(h.rt, mine, await h.view(key))
        # The same sync under way: in hand, the update waits for it.
        await _running_elsewhere(h, sync_id)
        with pytest.raises(Reschedule):
            await check_run.hold(h.rt, mine, await h.view(key))
