"""The durable job queue and its worker pool, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest
from sqlalchemy import update

from bot.runtime.workers import PoolSettings, Reschedule, WorkerPool
from storage import jobs, prs
from storage.models import Job, utcnow
from storage.statuses import SameWork

from ..helpers import enroll, until

FAST = PoolSettings(workers=3, lease_seconds=5, idle_poll_seconds=0.05,
                    backoff_base_seconds=0.2, backoff_cap_seconds=0.4)


async def test_same_idempotency_key_gives_one_job(db):
    first = await jobs.enqueue(db, "sync", "sync:acme/w#1:d1", pr_key="acme/w#1")
    second = await jobs.enqueue(db, "sync", "sync:acme/w#1:d1", pr_key="acme/w#1", payload={"x": 1})
    assert first[1] is True and second == (first[0], False)
    assert len(await jobs.list_jobs(db)) == 1


async def test_concurrent_enqueues_of_one_key_give_one_job(db):
    results = await asyncio.gather(*(jobs.enqueue(db, "sync", "same") for _ in range(10)))
    assert len({job_id for job_id, _ in results}) == 1
    assert sum(created for _, created in results) == 1


async def test_a_job_of_a_stale_process_key_is_dropped_without_running(db):
    old = await enroll(db, "acme/w#1")
    ran = []

    async def handler(job):
        ran.append(job.id)

    job_id, _ = await jobs.enqueue(db, "progress_check", "pc:1", pr_key="acme/w#1", process_key=old)
    current_id, _ = await jobs.enqueue(db, "progress_check", "pc:2", pr_key="acme/w#1", process_key=old)
    pool = WorkerPool(db, {"progress_check": handler}, FAST)
    assert await pool.run_one()
    assert ran == [job_id]
    # The run is abandoned and the PR resubmitted: the old run's queued job must not run.
    from bot.engine.submit import abandon_pr

    await abandon_pr(db, "acme/w#1", "stop")
    new = await enroll(db, "acme/w#1")
    assert new != old
    assert await pool.run_one()
    assert ran == [job_id]
    stale = await jobs.get_job(db, current_id)
    assert (stale.status, stale.last_error) == ("dropped", "process_key no longer owns the PR")


async def test_a_job_whose_worker_died_runs_again_after_its_lease(db):
    job_id, _ = await jobs.enqueue(db, "sync", "k1")
    dead = await jobs.claim(db, "dead-worker", lease_seconds=60)
    assert dead is not None and dead.id == job_id
    ran = []

    async def handler(job):
        ran.append(job.attempts)

    pool = WorkerPool(db, {"sync": handler}, FAST)
    assert not await pool.run_one(), "a live lease must not be taken over"
    # The lease runs out (its end moved into the past, not waited for: no clock window).
    async with db.session() as s:
        await s.exec(update(Job).where(Job.id == job_id).values(lease_until=utcnow() - timedelta(seconds=1)))
    assert await pool.run_one()
    assert ran == [2]
    assert (await jobs.get_job(db, job_id)).status == "done"
    # The dead worker waking up late cannot overwrite the outcome.
    assert not await jobs.fail(db, dead, "late", 0)
    assert (await jobs.get_job(db, job_id)).status == "done"


async def test_failures_retry_with_backoff_then_fail(db):
    job_id, _ = await jobs.enqueue(db, "sync", "k", max_attempts=3)
    calls = []

    async def handler(job):
        calls.append(utcnow())
        raise ValueError(f"attempt {job.attempts}")

    pool = WorkerPool(db, {"sync": handler}, FAST)
    assert await pool.run_one()
    job = await jobs.get_job(db, job_id)
    assert (job.status, job.attempts, job.last_error) == ("queued", 1, "ValueError: attempt 1")
    assert job.run_at >= calls[0] + timedelta(seconds=0.1)
    assert not await pool.run_one(), "not due before its backoff"
    for _ in range(2):
        await asyncio.sleep(0.45)
        assert await pool.run_one()
    job = await jobs.get_job(db, job_id)
    assert (job.status, job.attempts) == ("failed", 3)
    assert len(calls) == 3


async def test_reschedule_does_not_spend_an_attempt(db):
    job_id, _ = await jobs.enqueue(db, "sync", "k", max_attempts=1)
    seen = []

    async def handler(job):
        seen.append(job.attempts)
        if len(seen) == 1:
            raise Reschedule(utcnow() + timedelta(seconds=0.2), "rate limited")

    pool = WorkerPool(db, {"sync": handler}, FAST)
    assert await pool.run_one()
    job = await jobs.get_job(db, job_id)
    assert (job.status, job.attempts, job.last_error) == ("queued", 0, "rate limited")
    assert not await pool.run_one()
    await asyncio.sleep(0.25)
    assert await pool.run_one()
    assert seen == [1, 1]
    assert (await jobs.get_job(db, job_id)).status == "done"


async def test_unknown_kind_fails_without_retrying(db):
    job_id, _ = await jobs.enqueue(db, "mystery", "k")
    pool = WorkerPool(db, {}, FAST)
    assert await pool.run_one()
    job = await jobs.get_job(db, job_id)
    assert job.status == "failed" and "no handler" in job.last_error


async def test_a_pool_s_workers_leave_a_kind_they_cannot_run_to_a_process_that_can(db):
    # Two releases side by side (a rolling deploy): the older one's workers never claim a job of
    # a kind only the newer one has a handler for, so it is not failed as "no handler".
    job_id, _ = await jobs.enqueue(db, "newer_kind", "k")
    older = WorkerPool(db, {"sync": lambda job: None}, FAST)
    for lane in (older._lanes()["short"], *([older._lanes()["long"]] if older._lanes()["long"] else [])):
        assert not await older.run_one(**lane)
    assert (await jobs.get_job(db, job_id)).status == "queued"
    ran: list[str] = []

    async def handler(job):
        ran.append(job.kind)

    newer = WorkerPool(db, {"sync": handler, "newer_kind": handler}, FAST)
    assert await newer.run_one(**newer._lanes()["short"])
    assert ran == ["newer_kind"] and (await jobs.get_job(db, job_id)).status == "done"


async def test_pool_runs_every_job_exactly_once(db):
    counts: dict[str, int] = {}

    async def handler(job):
        counts[job.key] = counts.get(job.key, 0) + 1
        await asyncio.sleep(0.001)

    for n in range(40):
        await jobs.enqueue(db, "sync", f"k{n}")
    pool = WorkerPool(db, {"sync": handler}, FAST)
    pool.start()
    try:
        async with asyncio.timeout(30):
            while len(counts) < 40:
                await asyncio.sleep(0.05)
    finally:
        await pool.stop()
    assert counts == {f"k{n}": 1 for n in range(40)}
    assert {j.status for j in await jobs.list_jobs(db)} == {"done"}


async def test_heartbeat_keeps_a_long_job_from_being_reclaimed(db):
    # A lease of 3 s, renewed every second: the claim below comes once the first claim's lease
    # has run out, so only the renewals can have kept the job (a stall under 2 s is no flake).
    settings = PoolSettings(workers=1, lease_seconds=3.0, idle_poll_seconds=0.05)
    started, release = asyncio.Event(), asyncio.Event()
    runs = []

    async def handler(job):
        runs.append(job.id)
        started.set()
        await release.wait()

    await jobs.enqueue(db, "slow", "k")
    pool = WorkerPool(db, {"slow": handler}, settings)
    task = asyncio.create_task(pool.run_one("w1"))
    await started.wait()
    [claimed] = await jobs.list_jobs(db)
    first_lease = claimed.lease_until

    async def renewed_past_the_first_lease() -> bool:
        [job] = await jobs.list_jobs(db)
        return job.lease_until > first_lease and utcnow() > first_lease

    await until("a renewal, and the first lease run out", renewed_past_the_first_lease)
    assert await jobs.claim(db, "w2", 3.0) is None
    release.set()
    assert await task
    assert len(runs) == 1
    assert (await jobs.list_jobs(db))[0].status == "done"


async def test_stop_hands_back_a_cancelled_job(db):
    started = asyncio.Event()

    async def handler(job):
        started.set()
        await asyncio.sleep(60)

    job_id, _ = await jobs.enqueue(db, "slow", "k")
    pool = WorkerPool(db, {"slow": handler}, FAST)
    pool.start()
    await asyncio.wait_for(started.wait(), 10)
    await pool.stop(grace_seconds=0.1)
    job = await jobs.get_job(db, job_id)
    # Not left `running` under a lease nobody will renew: queued again, attempt not spent.
    assert (job.status, job.lease_owner, job.attempts) == ("queued", None, 0)


async def test_a_fenced_job_handler_can_write_through_its_key(db):
    """The pieces together: a job carrying the current key may write the row, an old one may not."""
    pk = await enroll(db, "acme/w#1")

    async def handler(job):
        assert await prs.fenced_update(db, job.pr_key, job.process_key, {"current_round": 2})

    await jobs.enqueue(db, "advance", "a1", pr_key="acme/w#1", process_key=pk)
    assert await WorkerPool(db, {"advance": handler}, FAST).run_one()
    assert (await prs.get(db, "acme/w#1")).pr.current_round == 2
    assert not await prs.fenced_update(db, "acme/w#1", "run-stale", {"current_round": 9})
    assert not await prs.fenced_update(db, "acme/w#1", pk, {"current_round": 9},
                                       expect_status="escalated")
    assert (await prs.get(db, "acme/w#1")).pr.current_round == 2


async def test_lease_expired_on_every_attempt_gives_up(db):
    job_id, _ = await jobs.enqueue(db, "sync", "k", max_attempts=2)
    for owner in ("a", "b"):
        assert await jobs.claim(db, owner, 0.05)
        await asyncio.sleep(0.1)
    pool = WorkerPool(db, {"sync": lambda job: asyncio.sleep(0)}, FAST)
    assert await pool.run_one()
    job = await jobs.get_job(db, job_id)
    assert (job.status, job.last_error) == ("failed", "lease expired on every attempt")


async def test_pruning_keeps_queued_and_recent_jobs(db):
    from datetime import timedelta

    from sqlalchemy import update

    from storage.models import Job

    for number, key in enumerate(("old-done", "new-done", "old-failed", "queued"), 1):
        await jobs.enqueue(db, "sync", key, pr_key=f"o/r#{number}")
    now = utcnow()
    async with db.session() as s:
        await s.exec(update(Job).where(Job.key == "old-done").values(status="done", finished_at=now - timedelta(days=2)))
        await s.exec(update(Job).where(Job.key == "new-done").values(status="done", finished_at=now))
        await s.exec(update(Job).where(Job.key == "old-failed").values(status="failed", finished_at=now - timedelta(days=2)))
    assert await jobs.prune(db, now - timedelta(days=1), now - timedelta(days=7)) == 1
    assert sorted(j.key for j in await jobs.list_jobs(db)) == ["new-done", "old-failed", "queued"]
    assert await jobs.pending_pr_keys(db, "sync") == {"o/r#4"}


async def test_syncs_of_one_pr_coalesce_while_one_is_queued(db):
    from datetime import timedelta

    first, created = await jobs.enqueue(db, "sync", "sync:o/r#1:d1", pr_key="o/r#1", same_as=SameWork.PR, delay_seconds=60)
    assert created
    # A burst of webhooks for the PR: each finds the queued sync and adds nothing.
    for i in range(2, 6):
        assert await jobs.enqueue(db, "sync", f"sync:o/r#1:d{i}", pr_key="o/r#1", same_as=SameWork.PR, delay_seconds=60) == (first, False)
    # Another PR, and another kind of job for the same PR, are not coalesced.
    assert (await jobs.enqueue(db, "sync", "sync:o/r#2:d1", pr_key="o/r#2", same_as=SameWork.PR, delay_seconds=60))[1]
    assert (await jobs.enqueue(db, "fix", "fix:o/r#1", pr_key="o/r#1", delay_seconds=60))[1]
    queued = [j for j in await jobs.list_jobs(db) if j.kind == "sync" and j.pr_key == "o/r#1"]
    assert [j.id for j in queued] == [first]
    # A sync wanted now pulls the queued one forward instead of waiting behind its debounce.
    assert await jobs.enqueue(db, "sync", "sync:o/r#1:now", pr_key="o/r#1", same_as=SameWork.PR) == (first, False)
    assert (await jobs.get_job(db, first)).run_at <= utcnow()
    # While it runs, news queues one more: the running one may have read GitHub before it.
    claimed = await jobs.claim(db, "w1", 30)
    assert claimed.id == first
    second, created = await jobs.enqueue(db, "sync", "sync:o/r#1:d9", pr_key="o/r#1", same_as=SameWork.PR)
    assert created and second != first
    assert (await jobs.get_job(db, second)).run_at <= utcnow() + timedelta(seconds=1)


@pytest.mark.parametrize("batch", [False, True], ids=["enqueue", "queue_wakes"])
async def test_sync_refs_of_one_ref_coalesce_while_one_is_queued(db, batch):
    """A CI's statuses for one sha: one `sync_ref` queued for the repository and ref, brought
    forward by a sooner one, and a new one once it runs; another sha or branch is another job."""
    sha = {"repo": "o/r", "sha": "a" * 40, "branch": None}

    async def queue(key: str, payload: dict, delay: float = 60) -> None:
        if batch:
            await db.write(jobs.queue_wakes, [dict(kind="sync_ref", same_as=SameWork.PAYLOAD, key=key, payload=payload, delay_seconds=delay)])
        else:
            await jobs.enqueue(db, "sync_ref", key, payload=payload, same_as=SameWork.PAYLOAD, delay_seconds=delay)

    def refs(found) -> list[tuple[str, dict]]:
        return sorted((j.key, json.loads(j.payload)) for j in found if j.kind == "sync_ref")

    for i in range(5):
        await queue(f"sync_ref:o/r:d{i}", sha)
    if batch:  # and twice in one batch
        await db.write(jobs.queue_wakes, [dict(kind="sync_ref", same_as=SameWork.PAYLOAD, key=f"sync_ref:o/r:b{i}", payload=sha,
                                               delay_seconds=60) for i in range(3)])
    await queue("sync_ref:o/r:other-sha", sha | {"sha": "b" * 40})
    await queue("sync_ref:o/r:branch", {"repo": "o/r", "sha": None, "branch": "main"})
    await queue("sync_ref:o/r2:d0", sha | {"repo": "o/r2"})
    assert refs(await jobs.list_jobs(db)) == [
        ("sync_ref:o/r2:d0", sha | {"repo": "o/r2"}), ("sync_ref:o/r:branch", {"repo": "o/r", "sha": None, "branch": "main"}),
        ("sync_ref:o/r:d0", sha), ("sync_ref:o/r:other-sha", sha | {"sha": "b" * 40})]
    first = next(j for j in await jobs.list_jobs(db) if j.key == "sync_ref:o/r:d0")
    assert first.run_at > utcnow() + timedelta(seconds=50)
    # One wanted now pulls the queued one forward.
    await queue("sync_ref:o/r:now", sha, delay=0)
    assert (await jobs.get_job(db, first.id)).run_at <= utcnow()
    # Once it runs, the next status queues a new one: the running one may have read before it.
    await db.write(jobs.queue_wakes, [])  # nothing to queue: nothing written
    claimed = await jobs.claim(db, "w1", 30)
    assert claimed.id == first.id
    await queue("sync_ref:o/r:after", sha)
    assert [k for k, p in refs(await jobs.list_jobs(db)) if p == sha] == ["sync_ref:o/r:after", "sync_ref:o/r:d0"]


async def test_the_poller_queues_one_sync_per_pr_however_many_ticks(db, bare_runtime):
    from bot.intake.poller import Poller

    from ..helpers import enroll

    await enroll(db, "o/r#1")
    await enroll(db, "o/r#2")
    poller = Poller(bare_runtime())
    for _ in range(3):
        await poller.tick()
    assert sorted(j.pr_key for j in await jobs.list_jobs(db) if j.status == "queued") == ["o/r#1", "o/r#2"]


async def test_the_poller_resumes_a_keyless_row(db, bare_runtime):
    from bot.intake.poller import Poller
    from storage import prs
    from storage.models import PullRequest

    now = utcnow()
    async with db.session() as s:
        s.add(PullRequest(pr_key="o/r#7", repo="o/r", number=7, url="u", title="t", status="converging",
                          current_round=2, process_key=None, created_at=now, updated_at=now))
    await Poller(bare_runtime()).tick()
    view = await prs.get(db, "o/r#7")
    assert view.pr.process_key is not None and view.run_state == "active" and view.pr.current_round == 1
    assert view.pr.submitted_by == "poller"


async def test_fixer_runs_never_hold_the_workers_other_jobs_need(db):
    """Every fixer worker is busy and one more fix job waits: a sync still runs at once."""
    release, started, synced = asyncio.Event(), [], asyncio.Event()

    async def fix(job):
        started.append(job.id)
        await release.wait()

    async def sync(job):
        synced.set()

    pool = WorkerPool(db, {"fix": fix, "sync": sync}, PoolSettings(
        workers=1, long_workers=2, long_kinds=("fix",), lease_seconds=30, idle_poll_seconds=0.05))
    for n in range(1, 4):
        await jobs.enqueue(db, "fix", f"fix:acme/w#{n}", pr_key=f"acme/w#{n}")
    pool.start()
    try:
        async with asyncio.timeout(10):
            while len(started) < 2:
                await asyncio.sleep(0.02)
        await jobs.enqueue(db, "sync", "sync:acme/w#9", pr_key="acme/w#9")
        pool.wake()
        await asyncio.wait_for(synced.wait(), 10)
        assert len(started) == 2  # the third fix job waits for a fixer worker, not a sync's
        release.set()
        async with asyncio.timeout(10):
            while len(started) < 3:
                await asyncio.sleep(0.02)
    finally:
        release.set()
        await pool.stop()


async def test_queue_wakes_does_what_enqueue_in_does_for_each_in_order(db):
    """The intake's batch of wakes (in `Database.write`, as the intake runs it): syncs coalesce
    (earliest time wins), known keys are skipped."""
    await jobs.enqueue(db, "sync", "hook:o/r#1:a", pr_key="o/r#1", same_as=SameWork.PR, delay_seconds=30)
    await jobs.enqueue(db, "command", "cmd:1", pr_key="o/r#1")
    before = utcnow()
    soonest = await db.write(jobs.queue_wakes, [
        dict(kind="sync", same_as=SameWork.PR, key="hook:o/r#1:b", pr_key="o/r#1", delay_seconds=0.2),  # pulls it forward
        dict(kind="sync", same_as=SameWork.PR, key="hook:o/r#2:a", pr_key="o/r#2", delay_seconds=30),
        dict(kind="sync", same_as=SameWork.PR, key="hook:o/r#2:b", pr_key="o/r#2", delay_seconds=0.2),  # one sync, sooner
        dict(kind="command", key="cmd:1", pr_key="o/r#1"),  # queued before
        dict(kind="command", key="cmd:2", pr_key="o/r#2", payload={"x": 1}),
        dict(kind="command", key="cmd:2", pr_key="o/r#2"),  # twice in the batch
        dict(kind="sync_ref", same_as=SameWork.PAYLOAD, key="ref:1", payload={"repo": "o/r", "sha": "abc"}),
    ])
    queued = {j.key: j for j in await jobs.list_jobs(db)}
    assert sorted(queued) == ["cmd:1", "cmd:2", "hook:o/r#1:a", "hook:o/r#2:a", "ref:1"]
    soon = utcnow() + timedelta(seconds=5)
    assert queued["hook:o/r#1:a"].run_at < soon and queued["hook:o/r#2:a"].run_at < soon
    assert queued["cmd:2"].payload == '{"x": 1}'
    assert queued["ref:1"].pr_key is None
    # The commands and the ref job are due now: the soonest of what it queued.
    assert before <= soonest < before + timedelta(seconds=0.2)

    # Syncs that only coalesce into ones queued as soon or sooner queue nothing to wake for.
    assert await db.write(jobs.queue_wakes, [
        dict(kind="sync", same_as=SameWork.PR, key="hook:o/r#1:c", pr_key="o/r#1", delay_seconds=5),
        dict(kind="sync", same_as=SameWork.PR, key="hook:o/r#2:c", pr_key="o/r#2", delay_seconds=5),
    ]) is None
    assert len(await jobs.list_jobs(db)) == 5


async def test_a_wake_that_comes_while_the_worker_looks_is_not_slept_through(db, monkeypatch):
    """A job queued (and woken for) while the only worker's claim is looking and finding
    nothing: the worker looks again instead of idling its whole poll interval (an hour here)."""
    ran = asyncio.Event()

    async def sync(job):
        ran.set()

    pool = WorkerPool(db, {"sync": sync}, PoolSettings(workers=1, lease_seconds=30, idle_poll_seconds=3600))
    claim, looks = jobs.claim, []

    async def claim_then_queue(*args, **kwargs):
        found = await claim(*args, **kwargs)
        looks.append(found)
        if len(looks) == 1:  # the first look found nothing; the job arrives before it idles
            assert found is None
            await jobs.enqueue(db, "sync", "sync:acme/w#1", pr_key="acme/w#1")
            pool.wake()
        return found

    monkeypatch.setattr(jobs, "claim", claim_then_queue)
    pool.start()
    try:
        await asyncio.wait_for(ran.wait(), 10)
    finally:
        await pool.stop()
    assert looks[0] is None and looks[1] is not None


async def test_one_wake_draws_in_as_many_workers_as_there_are_jobs(db):
    """Three jobs queued and one wake: each worker that claims sends the next idle one to look."""
    release, running = asyncio.Event(), []

    async def sync(job):
        running.append(job.key)
        await release.wait()

    pool = WorkerPool(db, {"sync": sync}, PoolSettings(workers=3, lease_seconds=30, idle_poll_seconds=3600))
    pool.start()
    try:
        async with asyncio.timeout(10):  # every worker has looked once and idles (for an hour)
            while len(pool._lanes_idle["short"].idle) < 3:
                await asyncio.sleep(0.01)
        for n in range(1, 4):
            await jobs.enqueue(db, "sync", f"sync:acme/w#{n}", pr_key=f"acme/w#{n}")
        pool.wake()
        async with asyncio.timeout(10):
            while len(running) < 3:
                await asyncio.sleep(0.01)
        assert sorted(running) == [f"sync:acme/w#{n}" for n in range(1, 4)]
    finally:
        release.set()
        await pool.stop()


async def test_next_due_is_the_earliest_waiting_effect_of_its_kind(db):
    from datetime import timedelta

    from bot.engine import outbox
    from storage.models import utcnow

    assert await outbox.next_due(db, "o/r#1", "reply") is None
    async with db.session() as s:
        await outbox.add(s, "reply", "late", pr_key="o/r#1", delay_seconds=600, replies=[])
        await outbox.add(s, "reply", "soon", pr_key="o/r#1", delay_seconds=60, replies=[])
        await outbox.add(s, "comment", "sooner", pr_key="o/r#1", marker="m", body="b")
        await outbox.add(s, "reply", "other", pr_key="o/r#2", replies=[])
    due = await outbox.next_due(db, "o/r#1", "reply")
    assert utcnow() + timedelta(seconds=50) < due < utcnow() + timedelta(seconds=70)


def _lanes_pool(db, handlers):
    """One worker per lane, and no idle polling to speak of: only a wake makes a worker look."""
    return WorkerPool(db, handlers, PoolSettings(workers=1, long_workers=1, long_kinds=("fix",),
                                                  lease_seconds=30, idle_poll_seconds=3600))


async def _idle(pool) -> None:
    async with asyncio.timeout(10):  # each worker has looked once and idles (for an hour)
        while any(len(lane.idle) < 1 for lane in pool._lanes_idle.values()):
            await asyncio.sleep(0.01)


async def test_a_job_that_queues_a_fixer_run_wakes_the_fixers_lane(db):
    """A step (short lane) queues a fix: the idle fixer worker takes it at once, not at its
    next idle poll (an hour here); and the fix's own follow-up (a short job) runs at once too."""
    ran = []

    async def step(job):
        ran.append(job.kind)
        async with db.session() as s:
            await jobs.enqueue_in(s, db.is_postgres, "fix", "fix:acme/w#1", pr_key="acme/w#1")

    async def fix(job):
        ran.append(job.kind)
        await jobs.enqueue(db, "progress_check", "pc:acme/w#1", pr_key="acme/w#1")

    async def progress_check(job):
        ran.append(job.kind)

    pool = _lanes_pool(db, {"sync": step, "fix": fix, "progress_check": progress_check})
    pool.start()
    try:
        await _idle(pool)
        await jobs.enqueue(db, "sync", "sync:acme/w#1", pr_key="acme/w#1")
        pool.wake()
        async with asyncio.timeout(10):
            while len(ran) < 3:
                await asyncio.sleep(0.01)
    finally:
        await pool.stop()
    assert ran == ["sync", "fix", "progress_check"]


async def test_a_job_that_queues_nothing_for_the_fixers_leaves_their_lane_asleep(db, monkeypatch):
    """Syncs that queue nothing, or only short work, send no fixer worker to look: after every
    job both lanes used to look, and the fixers' look found nothing nearly every time."""
    done = asyncio.Event()
    claim, looks = jobs.claim, {"short": 0, "long": 0}

    async def counting_claim(*args, **kwargs):
        looks["long" if kwargs.get("kinds") == ("fix",) else "short"] += 1
        return await claim(*args, **kwargs)

    async def sync(job):
        if job.key.endswith("#1"):
            await jobs.enqueue(db, "sync", "sync:acme/w#2", pr_key="acme/w#2")
        else:
            done.set()

    monkeypatch.setattr(jobs, "claim", counting_claim)
    pool = _lanes_pool(db, {"sync": sync})
    pool.start()
    try:
        await _idle(pool)
        before = dict(looks)
        await jobs.enqueue(db, "sync", "sync:acme/w#1", pr_key="acme/w#1")
        pool._lanes_idle["short"].poke()
        await asyncio.wait_for(done.wait(), 10)
        async with asyncio.timeout(10):  # the short worker is idle again
            while len(pool._lanes_idle["short"].idle) < 1:
                await asyncio.sleep(0.01)
    finally:
        await pool.stop()
    assert looks["long"] == before["long"]
    assert looks["short"] > before["short"]


KEY = "acme/w#1"


async def _queued_while_a_claim_runs(db, queue_again) -> tuple[Job | None, bool]:
    """A transaction that changes the PR queues its follow-up job (`queue_again(session)`: an
    update or a sync that coalesces into the one waiting) while a worker claims: what the claim
    took before the transaction committed, and whether the transaction found one waiting."""
    ending = db.session()
    s = await ending.__aenter__()
    try:
        assert await prs.fenced_update(None, KEY, await _key(db), {"last_action": "changed"}, session=s)
        coalesced = await queue_again(s)
        early = await asyncio.wait_for(jobs.claim(db, "w", 30), timeout=10)
    finally:
        await ending.__aexit__(None, None, None)
    return early, coalesced


async def _key(db) -> str:
    return (await prs.get(db, KEY)).pr.process_key


async def test_a_waiting_follow_up_is_not_claimed_while_the_change_it_covers_is_uncommitted(db):
    """PostgreSQL: the transaction that found a sync (or a check-run update) of the PR waiting
    adds none, because the waiting one will read the row after the change. A worker that claims
    it before the change commits would read the row without it, and nothing would come after:
    the waiting job is locked until the transaction ends (skipped by the claim meanwhile)."""
    from bot.engine import outbox

    if not db.is_postgres:
        import pytest

        pytest.skip("SQLite: a claim is a write transaction, taken after this one in turn")
    await enroll(db, KEY)
    sync_id, _ = await jobs.enqueue(db, "sync", "sync:first", pr_key=KEY)

    async def sync_again(s):
        async with asyncio.timeout(10):
            job_id, created = await jobs.enqueue_in(s, True, "sync", "sync:second", pr_key=KEY, same_as=SameWork.PR)
        return job_id == sync_id and not created

    early, coalesced = await _queued_while_a_claim_runs(db, sync_again)
    assert coalesced and early is None
    assert (await jobs.claim(db, "w", 30)).id == sync_id

    async with db.session() as s:
        assert await outbox.check_run(s, KEY, settle_seconds=0)
    async def check_run_again(s):
        return not await outbox.check_run(s, KEY, settle_seconds=0)

    early, coalesced = await _queued_while_a_claim_runs(db, check_run_again)
    assert coalesced and early is None
    assert (await jobs.claim(db, "w", 30)).kind == "effect"
