"""What a fix job does with its round before and after the agent: it runs no agent for work that
is no longer its own, and its verdict answers the round's threads only as far as the work went.

The agents here are fake fixers that return exactly what the command fixer returns in each case
(`bot/fixers/workspace.py`'s `Publication.apply`): a push refused by its lease, a push withheld,
a thread answered "fixed" with nothing to push, a guessed answer. The bot around them is real.
"""

from __future__ import annotations

import asyncio

from bot.engine.fixing import fix
from bot.engine.progress import progress_check
from bot.fixers import ScriptedFixer
from bot.fixers.base import ThreadAction, Verdict
from bot.fixers.workspace import Publication
from storage import jobs, rounds

from .harness import REPO, HeldFixer, bot_on_simulator, open_and_enroll, steps

QUIET = {"poller": {"interval_seconds": 3600}}  # only webhooks and jobs move things


class _FirstVerdict:
    """Returns `first(req)` on its first run; every later run is the scripted fixer's push."""

    kind = "fake"

    def __init__(self, first) -> None:
        self.first = first
        self.runs = 0
        self.inner = ScriptedFixer(["push"])

    async def run(self, req):
        self.runs += 1
        if self.runs == 1:
            verdict = self.first(req)
            return await verdict if asyncio.iscoroutine(verdict) else verdict
        return await self.inner.run(req)


def _one_thread(req) -> str:
    (finding,) = req.findings
    assert finding.thread_id
    return finding.thread_id


def _replies(h, number: int) -> list[str]:
    return [e["body"] for e in h.sim.effects("review_reply") if e.get("number") == number]


async def _round_one(h, key):
    view = await h.view(key)
    return None if view is None else await rounds.get(h.rt.db, key, view.pr.process_key, 1)


async def test_a_push_refused_by_its_lease_answers_no_thread(tmp_path, db_url):
    box: list = []

    async def refused(req):
        # Someone pushes while the agent works: the agent's push is refused by its lease.
        await box[0].sim.push(REPO, "feat", {"app/util.py": "X = 2\n"}, author="dev")
        said = Verdict(status="addressed", thread_actions=(
            ThreadAction(_one_thread(req), "declined", "not for this PR (refused push)"),))
        return Publication(rejected=True).apply(said)

    fixer = _FirstVerdict(refused)
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer, **QUIET) as h:
        box.append(h)
        h.sim.set_reviewer(REPO, steps(1, 0))
        key, number = await open_and_enroll(h)
        await h.wait_status(key, "merged", timeout=60)
        rnd = await _round_one(h, key)
        assert rnd.exit_head != rnd.entry_head and rnd.settled is None, "round 1 ended on the person's push"
        assert not [b for b in _replies(h, number) if "refused push" in b], _replies(h, number)


async def test_a_withheld_push_answers_no_thread(tmp_path, db_url):
    def withheld(req):
        said = Verdict(status="addressed", thread_actions=(
            ThreadAction(_one_thread(req), "declined", "not for this PR (withheld push)"),))
        return Publication(withheld="not pushed: could not confirm the run still owns the round").apply(said)

    fixer = _FirstVerdict(withheld)
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer, **QUIET) as h:
        h.sim.set_reviewer(REPO, steps(1, 0))
        key, number = await open_and_enroll(h)
        await h.wait_status(key, "merged", timeout=60)
        assert fixer.runs == 2, "the unfinished attempt was rerun"
        assert not [b for b in _replies(h, number) if "withheld push" in b], _replies(h, number)


async def test_a_thread_fixed_with_nothing_to_push_is_answered_without_a_commit(tmp_path, db_url):
    def fixed_already(req):
        return Verdict(status="addressed", thread_actions=(
            ThreadAction(_one_thread(req), "fixed", "it was fixed on main already"),))

    fixer = _FirstVerdict(fixed_already)
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer, **QUIET) as h:
        h.sim.set_reviewer(REPO, steps(1, 0))
        key, number = await open_and_enroll(h)

        async def answered():
            return [b for b in _replies(h, number) if "it was fixed on main already" in b]

        (reply,) = await h.wait_for("the thread's answer", answered, timeout=20)
        assert reply.startswith("Fixed. it was fixed on main already"), reply
        await h.wait_status(key, "merged", timeout=60)
        assert fixer.runs == 1, "answered without a change: the round went back to review"


async def test_a_guessed_answer_answers_its_round_and_is_never_remembered(tmp_path, db_url):
    def guessed(req):
        return Verdict(status="addressed", thread_actions=(
            ThreadAction(_one_thread(req), "declined", "looks intended (guessed)", inferred=True),))

    fixer = _FirstVerdict(guessed)
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer, **QUIET) as h:
        h.sim.set_reviewer(REPO, steps(1, 0))
        key, number = await open_and_enroll(h)
        await h.wait_status(key, "merged", timeout=60)
        assert [b for b in _replies(h, number) if "looks intended (guessed)" in b], "answered on its round"
        rnd = await _round_one(h, key)
        assert rnd.verdict == "converged" and rnd.settled is None, rnd.settled


# -- before the agent: work that is no longer the job's own runs no agent -----------------------


async def test_a_branch_pushed_while_the_fix_job_waited_runs_no_agent(tmp_path, db_url):
    # One fixer worker, held by the first PR's fixer: the second PR's fix job waits its turn.
    fixer = HeldFixer(first_only=True)
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer, jobs={"fixer_workers": 1}, **QUIET) as h:
        h.sim.set_reviewer(REPO, steps(1, 0, 1, 0))
        first, _ = await open_and_enroll(h, head="first")
        await h.wait_for("the first PR's fixer", fixer.at_work)
        second, number = await open_and_enroll(h, head="second")

        async def dispatched():
            rnd = await _round_one(h, second)
            return rnd if rnd is not None and rnd.fixer_started_at is not None else None

        rnd = await h.wait_for("the second PR's fixer dispatched", dispatched)
        # Someone pushes to the second PR's branch before its fix job runs.
        await h.sim.push(REPO, "second", {"app/util.py": "X = 2\n"}, author="dev")
        moved = await h.rt.github.branch_head("acme", "app", "second")
        assert moved != rnd.entry_head
        fixer.release.set()

        async def ended():
            found = await _round_one(h, second)
            return found if found is not None and found.status is not None else None

        done = await h.wait_for("the second PR's round 1 to end", ended, timeout=30)
        assert second not in fixer.ran, "the agent ran on a branch that moved under it"
        assert done.exit_head == moved
        await h.wait_status(second, "merged", timeout=60)
        await h.wait_status(first, "merged", timeout=60)


class _HeldAttempts:
    """Holds the first run of each attempt until released; a run after that pushes at once."""

    kind = "fake"

    def __init__(self) -> None:
        self.attempts: list[int] = []
        self.started = {0: asyncio.Event(), 1: asyncio.Event()}
        self.release = asyncio.Event()
        self.inner = ScriptedFixer(["push"])

    async def run(self, req):
        first = req.attempt not in self.attempts
        self.attempts.append(req.attempt)
        if first and req.attempt in self.started:
            self.started[req.attempt].set()
            await self.release.wait()
        return await self.inner.run(req)


async def test_a_fix_job_of_an_attempt_rerun_meanwhile_runs_no_agent(tmp_path, db_url):
    fixer = _HeldAttempts()
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer, jobs={"lease_seconds": 300}, **QUIET) as h:
        h.sim.set_reviewer(REPO, steps(1, 0))
        key, _ = await open_and_enroll(h)
        await asyncio.wait_for(fixer.started[0].wait(), 30)
        # The round's deadline check runs now (as if the agent had overrun it): attempt 1 starts.
        (deadline,) = [j for j in await jobs.list_jobs(h.rt.db, key)
                       if j.kind == "progress_check" and j.key.endswith(":1:0:deadline")]
        await progress_check(h.rt, deadline)
        await asyncio.wait_for(fixer.started[1].wait(), 30)
        (stale,) = [j for j in await jobs.list_jobs(h.rt.db, key) if j.kind == "fix" and j.key.endswith(":0")]
        rnd = await _round_one(h, key)
        assert (rnd.attempt, rnd.status, rnd.fixer_finished_at) == (1, None, None)

        # Attempt 0's fix job runs again (a lease re-claimed late, a redelivered job).
        await asyncio.wait_for(fix(h.rt, stale), 30)
        assert fixer.attempts == [0, 1], "the agent ran for an attempt the round no longer has"
        fixer.release.set()
        await h.wait_status(key, "merged", timeout=60)
