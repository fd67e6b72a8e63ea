"""The progress-check's and the fix job's guards, each against the race it exists for.

Every test drives the real bot against the simulator; where a job must run at one precise moment
(a straggler of a superseded run, a redelivery), the test runs that job's handler itself with the
job as stored, as a worker would (tests/guards/progress.toml names the guard each test kills).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlmodel import select

from bot.engine.fixing import fix
from bot.engine.progress import _progress_check, progress_check
from bot.fixers import ScriptedFixer
from bot.fixers.base import husk
from storage import escalations, rounds
from storage.locks import KeyedLocks
from storage.models import Job

from .harness import REPO, bot_on_simulator, due_soon, open_and_enroll, quiesce, steps

QUIET = {"poller": {"interval_seconds": 3600}}  # only webhooks and jobs move things


async def _jobs(h, kind: str | None = None) -> list[Job]:
    async with h.rt.db.session() as s:
        query = select(Job).order_by(Job.id)
        if kind is not None:
            query = query.where(Job.kind == kind)
        return list(await s.exec(query))


async def _job(h, key: str) -> Job | None:
    return next((j for j in await _jobs(h) if j.key == key), None)


async def _calm(h, timeout: float = 20) -> None:
    """Like `quiesce`, but a fixer hanging on purpose (its fix job running) does not count."""
    deadline = time.monotonic() + timeout
    calm = 0
    while calm < 3:
        await h.sim.settle()
        soon = due_soon()
        busy = [j for j in await _jobs(h) if j.status in ("queued", "running") and j.run_at <= soon
                and not (j.kind == "fix" and j.status == "running")]
        calm = 0 if busy else calm + 1
        if time.monotonic() > deadline:
            raise AssertionError(f"still busy: {[(j.kind, j.key, j.status) for j in busy]}")
        await asyncio.sleep(0.1)


async def _state(h, key: str) -> dict:
    """What a decision would change: the row, every round, every escalation, every job key."""
    view = await h.view(key)
    return {
        "row": view.pr.model_dump(exclude={"updated_at", "synced_at"}),
        "rounds": [r.model_dump() for r in await rounds.for_pr(h.rt.db, key)],
        "escalations": [(e.id, e.status, e.kind) for e in await escalations.for_pr(h.rt.db, key)],
        "jobs": sorted(j.key for j in await _jobs(h)),
    }


def _number(pr_key: str) -> int:
    return int(pr_key.rpartition("#")[2])


# -- 1. the head comes from the branch ref, not from the lagging PR object -------------------------


class _LagThenPush:
    """Pushes like the scripted fixer, but GitHub's PR object keeps showing the old head."""

    kind = "fake"

    def __init__(self, box: list) -> None:
        self.box = box
        self.inner = ScriptedFixer(["push"])

    async def run(self, req):
        await self.box[0].sim.lag_pr_head(REPO, _number(req.pr_key))
        return await self.inner.run(req)


async def test_the_check_sees_the_fixer_s_push_while_the_pr_object_still_shows_the_old_head(
        tmp_path, db_url):
    box: list = [None]
    async with bot_on_simulator(tmp_path, db_url, fixer=_LagThenPush(box), **QUIET) as h:
        box[0] = h
        h.sim.set_reviewer(REPO, steps(1, 0))
        key, number = await open_and_enroll(h)

        async def decided():
            view = await h.view(key)
            rnd = view and await rounds.get(h.rt.db, key, view.pr.process_key, 1)
            return rnd if rnd is not None and rnd.status is not None else None

        round1 = await h.wait_for("round 1 decided", decided)
        pushed = await h.rt.github.branch_head("acme", "app", "feat")
        # The fixer pushed, and the PR object still says the round's entry head.
        assert pushed != round1.entry_head
        assert (await h.http_github(f"/repos/{REPO}/pulls/{number}"))["head"]["sha"] == round1.entry_head
        # The check saw the push: round 1 addressed at the pushed head, round 2 under review.
        assert (round1.status, round1.exit_head) == ("addressed", pushed)
        assert (await h.view(key)).pr.current_round == 2
        assert await h.escalations(key) == []

        h.sim.release_pr_head(REPO, number)
        await h.wait_status(key, "merged")
        assert [r.status for r in await h.rounds(key)] == ["addressed", "converged"]


# -- 2. a check of a superseded run reads nothing and decides nothing ------------------------------


class _NoopThenHang:
    """Run 1 changes nothing, and leaves the branch unreadable so its check cannot decide yet;
    every later run works until released (the new run's fixer, at work while the test runs)."""

    kind = "fake"

    def __init__(self, box: list) -> None:
        self.box = box
        self.inner = ScriptedFixer(["noop"])
        self.runs = 0
        self.hanging = asyncio.Event()
        self.release = asyncio.Event()

    async def run(self, req):
        self.runs += 1
        if self.runs == 1:
            self.box[0].sim.inject_fault(r"/git/ref/heads/feat$", status=502)
            return await self.inner.run(req)
        self.hanging.set()
        await self.release.wait()
        return husk("released")


async def test_a_check_of_a_superseded_run_reads_nothing_and_decides_nothing(tmp_path, db_url):
    box: list = [None]
    fixer = _NoopThenHang(box)
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer, **QUIET) as h:
        box[0] = h
        h.sim.set_reviewer(REPO, steps(1))
        key, number = await open_and_enroll(h)
        old = (await h.wait_for("the run", lambda: h.view(key))).pr.process_key
        # The old run's fixer finished without a change; its check failed on the unreadable
        # branch and waits for its retry: the old round is open, its verdict recorded.
        check = await h.wait_for("the old check to fail once", lambda: _failed(h, f"pc:{old}:1:0:fixer"))

        await h.sim.comment(REPO, number, "/converge stop", user="maint")
        await h.wait_status(key, "abandoned")
        h.sim.clear_faults()
        await h.sim.comment(REPO, number, "/converge", user="maint")
        await asyncio.wait_for(fixer.hanging.wait(), 30)  # the new run's fixer is at work
        await _calm(h)
        view = await h.view(key)
        # The straggler's shape: the new run is at the old one's round and attempt, and the old
        # round still looks open with a finished fixer.
        assert view.pr.process_key != old and (view.pr.status, view.pr.current_round) == ("converging", 1)
        assert (await rounds.get(h.rt.db, key, view.pr.process_key, 1)).attempt == 0
        stale = await rounds.get(h.rt.db, key, old, 1)
        assert (stale.attempt, stale.status, stale.verdict) == (0, None, "addressed")

        before, requests = await _state(h, key), h.sim.counters.total()
        await progress_check(h.rt, check)  # the old run's check runs at last, after the resubmit
        after = await _state(h, key)
        assert after["row"] == before["row"], "the straggler decided for the new run"
        assert after == before, "the straggler decided something"
        assert h.sim.counters.total() == requests, "the straggler read GitHub"
        fixer.release.set()


async def _failed(h, key: str) -> Job | None:
    job = await _job(h, key)
    return job if job is not None and "head unreadable" in (job.last_error or "") else None


# -- 3. a fix job of a stopped run never runs the agent --------------------------------------------


class _HangThenPush:
    """Runs 1 and 2 (the old run's fixer, the new run's) work until released; later runs push."""

    kind = "fake"

    def __init__(self) -> None:
        self.inner = ScriptedFixer(["push"])
        self.requests: list = []
        self.hanging = [asyncio.Event(), asyncio.Event()]
        self.release = asyncio.Event()

    async def run(self, req):
        self.requests.append(req)
        if len(self.requests) <= 2:
            self.hanging[len(self.requests) - 1].set()
            await self.release.wait()
            return husk("released")
        return await self.inner.run(req)


async def test_a_fix_job_of_a_stopped_run_never_runs_the_agent(tmp_path, db_url):
    fixer = _HangThenPush()
    # The heartbeat finds the stopped run's job orphaned within a third of the lease. A lease much
    # shorter would run out in a stall of the loaded machine, and the job be run again by others.
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer, jobs={"lease_seconds": 9}, **QUIET) as h:
        h.sim.set_reviewer(REPO, steps(1))
        key, number = await open_and_enroll(h)
        await asyncio.wait_for(fixer.hanging[0].wait(), 30)
        old = (await h.view(key)).pr.process_key
        await h.sim.comment(REPO, number, "/converge stop", user="maint")
        await h.wait_status(key, "abandoned")
        # Its worker gives the orphaned job up (the agent is cancelled) and the pool drops it.
        straggler = await h.wait_for("the old fix job dropped", lambda: _dropped(h, f"fix:{old}:1:0"))
        await h.sim.comment(REPO, number, "/converge", user="maint")
        await asyncio.wait_for(fixer.hanging[1].wait(), 30)
        await _calm(h)
        view = await h.view(key)
        assert view.pr.process_key != old and (view.pr.status, view.pr.current_round) == ("converging", 1)
        stale = await rounds.get(h.rt.db, key, old, 1)
        # The old round still looks open at the new run's round and attempt, fixer unfinished.
        assert (stale.attempt, stale.status, stale.fixer_finished_at) == (0, None, None)
        assert (await rounds.get(h.rt.db, key, view.pr.process_key, 1)).attempt == 0

        head, moves = await h.rt.github.branch_head("acme", "app", "feat"), len(h.sim.ref_updates)
        before = await _state(h, key)
        await fix(h.rt, straggler)  # the old run's fix job, run again (a lease re-claimed late)
        assert len(fixer.requests) == 2, "the agent ran for a stopped run"
        assert await h.rt.github.branch_head("acme", "app", "feat") == head
        assert len(h.sim.ref_updates) == moves, "something was pushed"
        assert await _state(h, key) == before
        fixer.release.set()


async def _dropped(h, key: str) -> Job | None:
    job = await _job(h, key)
    return job if job is not None and job.status == "dropped" else None


# -- 4. after a /retry: every job of the replaced attempt is fenced, in any process --------------


class _WatchedLocks(KeyedLocks):
    """The runtime's per-PR step locks, recording which tasks hold or wait for each key."""

    def __init__(self) -> None:
        super().__init__()
        self.tasks: dict[str, set[asyncio.Task]] = {}

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        here = self.tasks.setdefault(key, set())
        task = asyncio.current_task()
        here.add(task)
        try:
            async with super().hold(key):
                yield
        finally:
            here.discard(task)


async def _escalated_after_a_noop(h) -> tuple[str, int, str, _WatchedLocks]:
    """Round 1: one finding, a fixer that changes nothing, its check escalates (no advance)."""
    h.sim.set_reviewer(REPO, steps(1, 0))
    key, number = await open_and_enroll(h)
    view = await h.wait_status(key, "escalated")
    await quiesce(h)
    pk = view.pr.process_key
    assert view.pr.last_progress_job_key == f"pc:{pk}:1:0:fixer"
    h.rt.step_locks = _WatchedLocks()  # nothing holds the PR now: the swap is safe
    return key, number, pk, h.rt.step_locks


async def _retry(h, key: str, number: int, locks: _WatchedLocks) -> None:
    """A maintainer's `/retry`, acknowledged: its step is queued and waits at the PR's lock."""
    comment = await h.sim.comment(REPO, number, "/converge retry", user="maint")
    me = asyncio.current_task()

    async def waiting() -> bool:
        # The command queued the PR's step with its acknowledgement (into the PR's pending
        # sync, if one was queued): it runs, and waits at the PR's lock.
        handled = [j for j in await _jobs(h, "command") if j.key == f"cmd:{comment.id}" and j.status == "done"]
        steps = [j for j in await _jobs(h, "sync") if j.pr_key == key and j.status == "running"]
        return bool(handled and steps) and bool(locks.tasks.get(key, set()) - {me})

    await h.wait_for("the retry's step at the PR's lock", waiting)
    assert (await h.view(key)).pr.last_action == "round 1 retried by @maint"


# After the retry the fixer runs again and pushes: round 1 is addressed by that push, round 2's
# review is clean. A check deciding the retried round itself would add a round (or end round 1
# at a head nobody pushed).
RETRY_FIXER = ["noop", "push"]


async def test_after_a_retry_no_job_of_the_replaced_attempt_decides_the_round(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(RETRY_FIXER), **QUIET) as h:
        key, number, pk, locks = await _escalated_after_a_noop(h)
        redelivered = await _job(h, f"pc:{pk}:1:0:fixer")  # done: it escalated the PR
        deadline_check = await _job(h, f"pc:{pk}:1:0:deadline")  # queued, due later
        assert (redelivered.status, deadline_check.status) == ("done", "queued")
        async with locks.hold(key):  # the retry's own step waits: the round is converging, unstarted
            await _retry(h, key, number, locks)
            rnd = await rounds.get(h.rt.db, key, pk, 1)
            assert (rnd.status, rnd.entry_head) == (None, None)  # restarted: open, no entry head yet
            before, requests = await _state(h, key), h.sim.counters.total()
            # Both checks of the replaced attempt run now, as in a second process (which this
            # process's step lock does not hold back): the deadline's coming due, and the fixer's
            # delivered again (its worker died after the commit, before marking it done). The
            # retried round looks open at its round with no entry head, so either one deciding it
            # would call it addressed at a head nobody pushed.
            for job in (deadline_check, redelivered):
                await _progress_check(h.rt, job)
            assert await _state(h, key) == before, "a job of the replaced attempt decided the retried round"
            assert h.sim.counters.total() == requests, "a job of the replaced attempt read GitHub"

        # The retry goes on as the step decides it: the fixer runs again and pushes.
        await h.wait_status(key, "merged")
        round1, round2 = await h.rounds(key)
        assert (round1.status, round2.status) == ("addressed", "converged")
        assert [j.key for j in await _jobs(h, "fix")] == [f"fix:{pk}:1:0", f"fix:{pk}:1:2"]
