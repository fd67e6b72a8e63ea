"""What the job and delivery tables keep, on both backends: a job's end is written once, and the
pruning keeps what is still read (a dry run's records, failed jobs for a week, the deliveries
the redelivery's lookback may still meet)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import update

from bot.config import RetentionConfig
from bot.engine import outbox
from storage import deliveries, jobs
from storage.models import Job, WebhookDelivery, utcnow

from ..helpers import enroll
from ..serving import make_config, serving
from .test_webhooks import signed

KEY = "acme/w#1"
RETENTION = timedelta(days=RetentionConfig().deliveries_days)


async def test_a_job_its_handler_settled_as_a_dry_run_is_not_completed_over(db):
    """A dry run records the effect it would have made on the job itself; the worker's own end
    after the handler then finds no running job of its lease and writes nothing."""
    await enroll(db, KEY)
    await jobs.enqueue(db, "effect", "merge-1", pr_key=KEY, payload={"effect": "merge"})
    job = await jobs.claim(db, "a-worker", 300)
    assert job is not None and await outbox.record_dry_run(db, job, "merged acme/w#1")
    assert not await jobs.complete(db, job)
    assert not await jobs.fail(db, job, "late", 0)
    assert not await jobs.renew_lease(db, job, 300)
    ended = await jobs.get_job(db, job.id)
    assert (ended.status, ended.last_error, ended.lease_until) == (
        outbox.DRY_RUN, "dry run: would have merged acme/w#1", None)
    assert await outbox.pending(db, KEY, "merge", dry_run=True)  # what holds the PR at merging


async def test_pruning_keeps_a_dry_runs_records_however_old(db):
    """A dry run's record of a merge holds its PR at `merging` (`outbox.pending`): pruned, the
    step would decide the merge again. Done jobs go after a day, failed ones after a week."""
    await enroll(db, KEY)
    now = utcnow()
    ended = {"done": ("done", 2), "failed": ("failed", 8), "dry": (outbox.DRY_RUN, 30)}
    for key in ended:
        await jobs.enqueue(db, "effect", key, pr_key=KEY, payload={"effect": "merge"})
    async with db.session() as s:
        for key, (status, days) in ended.items():
            await s.exec(update(Job).where(Job.key == key).values(status=status,
                                                                  finished_at=now - timedelta(days=days)))
    assert await jobs.prune(db, now - timedelta(days=1), now - timedelta(days=7)) == 2
    assert [(j.key, j.status) for j in await jobs.list_jobs(db)] == [("dry", outbox.DRY_RUN)]
    assert await outbox.pending(db, KEY, "merge", dry_run=True)


async def test_a_delivery_is_remembered_past_the_redelivery_lookback_when_the_tables_are_pruned(db_url):
    """The poller's pruning forgets deliveries a week old: a delivery received within that
    (within any redelivery's lookback) sent again is still a duplicate, its jobs not queued again."""
    body = b'{"zen": "once"}'
    async with serving(make_config(db_url)) as (rt, http):
        for delivery in ("recent", "old"):
            r = await http.post("/webhook", content=body, headers=signed(body, "ping", delivery))
            assert r.status_code == 202, r.text
        async with rt.db.session() as s:
            await s.exec(update(WebhookDelivery).where(WebhookDelivery.delivery_id == "old").values(
                received_at=utcnow() - RETENTION - timedelta(hours=1)))
        assert await deliveries.prune(rt.db, utcnow() - RETENTION) == 1
        again = await http.post("/webhook", content=body, headers=signed(body, "ping", "recent"))
        assert (again.status_code, again.json()["outcome"]) == (200, "duplicate")
        assert await deliveries.seen(rt.db, ["recent", "old"]) == {"recent"}
