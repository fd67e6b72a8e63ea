"""Two deciders from one read write once: the fixer dispatch, the nudge and the converge.

A step reads the PR, then decides; another decider (another replica's step, or a step that read
before this one wrote) may read the same state and write first. Each write below is fenced on
what its step read, so the late decider loses and its effects (a fixer job, a review request, a
round's end) are never recorded a second time. As in tests/e2e/test_replica_guards.py, the first
step is paused right after its read, the second runs its own step meanwhile, then the first goes
on from its stale read.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

from sqlmodel import select

from bot.engine import step as step_module
from bot.rules.decide import decide_step
from bot.rules.model import Converge, Fix, Nudge
from storage.models import Job, utcnow

from .harness import REPO, HeldFixer, bot_on_simulator, open_and_enroll, quiesce, steps

QUIET = {"poller": {"interval_seconds": 3600}}  # only webhooks and jobs move things


class _PausedDecider:
    """The first step whose read decides `wanted` pauses right after its read, until released."""

    def __init__(self, monkeypatch, wanted: type) -> None:
        self.wanted = wanted
        self.real = step_module.read_snapshot
        self.read, self.release = asyncio.Event(), asyncio.Event()
        self.task: asyncio.Task | None = None
        monkeypatch.setattr(step_module, "read_snapshot", self._read)

    async def _read(self, rt, pr, head, reviews):
        snap = await self.real(rt, pr, head, reviews)
        if self.task is None and any(isinstance(a, self.wanted) for a in decide_step(snap).actions):
            self.task = asyncio.current_task()
            self.read.set()
            await self.release.wait()
        return snap

    async def paused(self) -> None:
        await asyncio.wait_for(self.read.wait(), 30)

    async def go_on(self) -> None:
        """Release the paused step and wait until it has decided and written (or lost)."""
        assert self.task is not None
        self.release.set()
        await asyncio.wait_for(asyncio.shield(self.task), 30)


async def _jobs(h, key: str, kind: str) -> list[Job]:
    async with h.rt.db.read_session() as s:
        return list((await s.exec(select(Job).where(Job.pr_key == key, Job.kind == kind).order_by(Job.id))).all())


async def _nudges(h, key: str) -> list[Job]:
    return [j for j in await _jobs(h, key, "effect")
            if (p := json.loads(j.payload)).get("effect") == "request_review" and p.get("nudge")]


async def test_two_steps_deciding_the_fix_from_one_read_dispatch_one_fixer(tmp_path, db_url, monkeypatch):
    fixer = HeldFixer()
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer, **QUIET) as h:
        h.sim.set_reviewer(REPO, steps(1, 0))
        decider = _PausedDecider(monkeypatch, Fix)
        # The review's step reads the finding and pauses before it hands the round to the fixer.
        key, _ = await open_and_enroll(h)
        await decider.paused()
        # Another decider reads the same review and dispatches the fixer first.
        await step_module._step(h.rt, key)
        await asyncio.wait_for(fixer.started.wait(), 30)
        assert (await h.view(key)).pr.status == "converging"

        await decider.go_on()
        fixes = await _jobs(h, key, "fix")
        assert [j.key.rpartition(":")[2] for j in fixes] == ["0"], [j.key for j in fixes]
        (rnd,) = await h.rounds(key)
        assert (rnd.round_no, rnd.attempt) == (1, 0)
        deadlines = [j for j in await _jobs(h, key, "progress_check") if j.key.endswith(":deadline")]
        assert len(deadlines) == 1, [j.key for j in deadlines]
        fixer.release.set()
        await h.wait_status(key, "merged", timeout=60)


async def test_two_steps_deciding_a_nudge_from_one_read_nudge_once(tmp_path, db_url, monkeypatch):
    # No reviewer answers: the round waits for its review, a nudge due every second.
    async with bot_on_simulator(tmp_path, db_url, convergence={"nudge_window_seconds": 1}, **QUIET) as h:
        key, _ = await open_and_enroll(h)
        waiting = await h.wait_status(key, "waiting_review")
        await quiesce(h)
        due = waiting.pr.last_nudge_at + timedelta(seconds=1.2)
        await h.wait_for("the nudge to come due", lambda: _past(due))
        assert await _nudges(h, key) == []

        decider = _PausedDecider(monkeypatch, Nudge)
        stale = asyncio.create_task(step_module._step(h.rt, key))
        await decider.paused()
        await step_module._step(h.rt, key)  # the other decider nudges first
        assert len(await _nudges(h, key)) == 1
        nudged = (await h.view(key)).pr.last_nudge_at

        await decider.go_on()
        await stale
        await quiesce(h)
        assert len(await _nudges(h, key)) == 1, "the reviewers were nudged twice for one nudge due"
        assert (await h.view(key)).pr.last_nudge_at == nudged


async def test_two_steps_deciding_the_converge_from_one_read_converge_once(tmp_path, db_url, monkeypatch):
    # Approval required: the converged PR waits in `waiting_merge`, owned by its active run.
    async with bot_on_simulator(tmp_path, db_url, merge={"require_approval": True}, **QUIET) as h:
        h.sim.set_reviewer(REPO, steps(0))
        decider = _PausedDecider(monkeypatch, Converge)
        # The clean review's step reads it and pauses before it converges.
        key, _ = await open_and_enroll(h)
        await decider.paused()
        await step_module._step(h.rt, key)  # the other decider converges, and the merge stage goes on
        first = await h.view(key)
        assert first.pr.converged_at is not None and first.pr.status == "waiting_merge"
        (rnd,) = await h.rounds(key)
        assert rnd.status == "converged" and rnd.ended_at is not None

        await decider.go_on()
        await quiesce(h)
        after = await h.view(key)
        assert (after.pr.status, after.pr.converged_at) == ("waiting_merge", first.pr.converged_at)
        assert after.pr.last_action == first.pr.last_action
        (again,) = await h.rounds(key)
        assert again.ended_at == rnd.ended_at, "the round was ended a second time"


async def _past(moment) -> bool:
    return utcnow() > moment
