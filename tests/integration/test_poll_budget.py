"""The poller paces idle re-reads by the rate limit left (bot/github/ratebudget.py)."""

from __future__ import annotations

import time
from datetime import timedelta

from sqlalchemy import update

from bot import metrics
from bot.intake.poller import Poller
from bot.runtime.context import Runtime
from storage import jobs
from storage.models import PullRequest, utcnow

from ..helpers import enroll

KEYS = [f"o/r#{n}" for n in range(1, 7)]


async def _enrolled(db, bare_runtime) -> Runtime:
    for key in KEYS:
        await enroll(db, key)
    # Synced long ago for the higher numbers: they are the ones waiting longest for a re-read.
    async with db.session() as s:
        for n, key in enumerate(KEYS, 1):
            await s.exec(update(PullRequest).where(PullRequest.pr_key == key)
                         .values(synced_at=utcnow() - timedelta(minutes=n)))
    return bare_runtime()


async def _queued(db) -> list[str]:
    return sorted(j.pr_key for j in await jobs.list_jobs(db) if j.status == "queued" and j.kind == "sync")


async def test_with_budget_to_spare_every_active_pr_is_polled(db, bare_runtime):
    rt = await _enrolled(db, bare_runtime)
    rt.rate_budget.observe("core", 5000, 4000, time.time() + 1800)
    poller = Poller(rt)
    await poller.tick()
    assert await _queued(db) == KEYS and poller.deferred == 0


async def test_near_the_reserve_only_the_allowance_is_polled_the_longest_waiting_first(db, bare_runtime):
    rt = await _enrolled(db, bare_runtime)
    # 100 an hour, 20 kept for PRs with news, 26 left, the reset 10 s away (inside one poll
    # interval): 6 above the reserve, 3 per re-read at worst, so two PRs this tick.
    rt.rate_budget.observe("core", 100, 26, time.time() + 10)
    poller = Poller(rt)
    before = metrics.IDLE_POLLS_DEFERRED._value.get()
    await poller.tick()
    assert await _queued(db) == ["o/r#5", "o/r#6"]
    assert poller.deferred == 4
    assert metrics.IDLE_POLLS_DEFERRED._value.get() - before == 4


async def test_at_the_reserve_no_idle_pr_is_polled(db, bare_runtime):
    rt = await _enrolled(db, bare_runtime)
    rt.rate_budget.observe("core", 100, 20, time.time() + 600)
    poller = Poller(rt)
    await poller.tick()
    assert await _queued(db) == [] and poller.deferred == len(KEYS)


async def test_a_tick_whose_cost_just_fits_above_the_reserve_polls_every_pr(db, bare_runtime):
    # Six re-reads at 3 requests each: 18 above a reserve of 20 fits 38 left exactly, not 37.
    # The reset is half an hour away, so what the allowance would give per tick is none.
    rt = await _enrolled(db, bare_runtime)
    assert Poller(rt).expected_cost() == 3
    rt.rate_budget.observe("core", 100, 37, time.time() + 1800)
    assert rt.rate_budget.reserve("core") == 20 and rt.rate_budget.idle_allowance(cost=3) == 0
    poller = Poller(rt)
    await poller.tick()
    assert await _queued(db) == [] and poller.deferred == len(KEYS)
    # One request more (the window's reset read anew: within a window the balance only falls).
    assert rt.rate_budget.observe("core", 100, 38, time.time() + 3600)
    assert rt.rate_budget.idle_allowance(cost=3) == 0  # every PR polled is the fit, not the allowance
    await poller.tick()
    assert await _queued(db) == KEYS and poller.deferred == 0
