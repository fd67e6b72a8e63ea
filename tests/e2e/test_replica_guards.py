"""What keeps two replicas on one database from deciding one PR twice: the PR's turn across
processes, and a round start fenced on exactly what its step read."""

from __future__ import annotations

import asyncio

import pytest
from sqlmodel import select

from bot.engine import step as step_module
from bot.rules.decide import decide_step
from bot.rules.model import Escalate
from bot.runtime.workers import Reschedule
from storage.database import Database
from storage.models import Job, utcnow

from .harness import REPO, HeldFixer, bot_on_simulator, open_and_enroll, quiesce, steps


async def _review_requests(h, key: str) -> list[Job]:
    async with h.rt.db.read_session() as s:
        return list((await s.exec(select(Job).where(
            Job.pr_key == key, Job.kind == "effect", Job.payload.contains('"effect": "request_review"')))).all())


async def test_two_steps_deciding_one_round_start_from_one_read_ask_for_one_review(tmp_path, db_url, monkeypatch):
    async with bot_on_simulator(tmp_path, db_url, poller={"interval_seconds": 3600}) as h:
        h.sim.set_reviewer(REPO, steps(0))
        # The first step of the new PR reads it `converging`, then pauses before deciding; a
        # second step (another replica's: it does not wait for this process's turn) reads the
        # same row, starts round 1 and asks for the review.
        real, reading, release, paused = step_module.read_snapshot, asyncio.Event(), asyncio.Event(), []

        async def pause_the_first(rt, pr, head, reviews):
            if not paused:
                paused.append(pr.status)
                reading.set()
                await release.wait()
            return await real(rt, pr, head, reviews)

        monkeypatch.setattr(step_module, "read_snapshot", pause_the_first)
        key, _ = await open_and_enroll(h)
        await asyncio.wait_for(reading.wait(), 30)
        assert paused == ["converging"]
        await step_module._step(h.rt, key)
        assert (await h.view(key)).pr.status == "waiting_review"
        # The first step now decides the same start from its stale read: its write must lose.
        release.set()
        await quiesce(h)
        requests = await _review_requests(h, key)
        assert len(requests) == 1, [r.key for r in requests]
        assert (await h.view(key)).pr.current_round == 1


async def test_a_step_is_put_off_while_another_replica_holds_the_prs_turn(tmp_path, db_url):
    if not db_url.startswith("postgresql"):
        pytest.skip("a SQLite file serves one process: there is no other replica")
    async with bot_on_simulator(tmp_path, db_url, poller={"interval_seconds": 3600}) as h:
        h.sim.set_reviewer(REPO, steps(0))
        key, _ = await open_and_enroll(h)
        await h.wait_status(key, "waiting_review", "converged", "merged")
        await quiesce(h)
        job = Job(kind="sync", key=f"sync:{key}:test", pr_key=key, payload="{}")
        other = Database(db_url)  # another replica: its own engine and connections
        try:
            async with other.exclusive(f"pr:{key}") as mine:
                assert mine
                with pytest.raises(Reschedule):
                    await step_module.step(h.rt, job)
            await step_module.step(h.rt, job)  # its turn again, once the other let go
        finally:
            await other.dispose()


async def test_a_stalled_review_decided_before_the_review_came_does_not_escalate_the_fixing_round(
        tmp_path, db_url, monkeypatch):
    fixer = HeldFixer()
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer, poller={"interval_seconds": 3600},
                                convergence={"review_wait_timeout_seconds": 1}) as h:
        # The review comes 3 s after the request: after the 1 s wait has run out.
        h.sim.set_reviewer(REPO, steps(1, 0, delay=3.0))
        key, _ = await open_and_enroll(h)
        waiting = await h.wait_status(key, "waiting_review")
        await h.wait_for("the review wait to run out", lambda: _past(waiting.pr.waiting_since, 1.2))
        # A step reads the PR waiting past its timeout, then pauses before deciding; meanwhile
        # the review lands and another step sends the round to the fixer.
        real, reading, release, snapshots = step_module.read_snapshot, asyncio.Event(), asyncio.Event(), []

        async def pause_the_first(rt, pr, head, reviews):
            snap = await real(rt, pr, head, reviews)
            if not snapshots:
                snapshots.append(snap)
                reading.set()
                await release.wait()
            return snap

        monkeypatch.setattr(step_module, "read_snapshot", pause_the_first)
        stale = asyncio.create_task(step_module._step(h.rt, key))
        await asyncio.wait_for(reading.wait(), 30)
        assert isinstance(decide_step(snapshots[0]).actions[0], Escalate), "the stale step escalates"
        await asyncio.wait_for(fixer.started.wait(), 30)
        assert (await h.view(key)).pr.status == "converging"
        release.set()
        await asyncio.wait_for(stale, 30)
        after = await h.view(key)
        assert (after.pr.status, await h.escalations(key)) == ("converging", [])
        fixer.release.set()
        await h.wait_status(key, "merged", timeout=60)


async def _past(since, seconds: float) -> bool:
    return (utcnow() - since).total_seconds() > seconds
