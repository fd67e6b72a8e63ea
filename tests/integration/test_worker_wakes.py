"""A wake for work due later comes when the work is due, not at the next idle poll."""

from __future__ import annotations

import asyncio
import time

from bot.runtime.workers import PoolSettings, WorkerPool
from storage import jobs


async def test_a_wake_for_a_delayed_job_comes_when_the_job_is_due(db):
    """A webhook's sync is debounced (due in 0.2 s) and woken for with that delay: the idle
    worker looks once it is due. Woken at once instead, the worker looks too early, finds
    nothing due and idles its whole poll interval (an hour here) with the sync due."""
    ran = asyncio.Event()

    async def sync(job):
        ran.set()

    pool = WorkerPool(db, {"sync": sync}, PoolSettings(workers=1, lease_seconds=30, idle_poll_seconds=3600))
    pool.start()
    try:
        async with asyncio.timeout(10):  # the worker has looked once and idles (for an hour)
            while len(pool._lanes_idle["short"].idle) < 1:
                await asyncio.sleep(0.01)
        queued = time.monotonic()
        await jobs.enqueue(db, "sync", "sync:acme/w#1:d1", pr_key="acme/w#1", delay_seconds=0.3)
        pool.wake(0.3)
        await asyncio.wait_for(ran.wait(), 10)
        assert time.monotonic() - queued >= 0.3, "run before it was due"
    finally:
        await pool.stop()


async def test_wakes_far_off_share_timers_each_at_most_five_percent_late(db):
    """A long run queues wakes up to an hour off, one per PR (a review's timeout): they share a
    few hundred timers (a grid a twentieth of their delay), not one each kept for the hour."""
    pool = WorkerPool(db, {}, PoolSettings(workers=1, lease_seconds=30, idle_poll_seconds=3600))
    loop = asyncio.get_running_loop()
    try:
        for i in range(1, 20_000):
            pool.wake(i * 0.18)  # 0.18 s to an hour, every 0.18 s
        assert len(pool._timers) < 400, len(pool._timers)
        for (width, index), timer in pool._timers.items():
            assert timer.when() == width * index
        # Each wake's timer fires after it is due and at most 5% (and one grid step) later.
        due = loop.time() + 1234.5
        pool.wake(1234.5)
        fires = [t.when() for t in pool._timers.values() if t.when() >= due]
        assert min(fires) - due <= 1234.5 / 20
    finally:
        await pool.stop()
