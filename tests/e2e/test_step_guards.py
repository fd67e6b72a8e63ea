"""The step's guards, each against the race it exists for: a stale heal, an out-of-band end."""

from __future__ import annotations

import asyncio

from bot.engine import step as step_module
from bot.fixers import ScriptedFixer
from bot.rules.decide import decide_step
from bot.rules.model import Heal
from storage import commands, jobs, runs

from .harness import REPO, HeldFixer, bot_on_simulator, open_and_enroll, quiesce, steps


async def test_a_heal_decided_before_an_answer_landed_does_not_undo_the_answer(tmp_path, db_url, monkeypatch):
    conv = {"escalation_heal_grace_seconds": 0}  # any escalated PR with nothing open is healed
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["push"]), convergence=conv,
                                poller={"interval_seconds": 3600}) as h:
        h.sim.set_reviewer(REPO, steps(1))
        key, number = await open_and_enroll(h, command="/converge start --rounds 1")
        await h.wait_status(key, "escalated", timeout=60)
        (esc,) = await h.escalations(key)
        assert esc.kind == "round_cap"  # answered, the PR resumes in round 2, waiting for a review
        await quiesce(h)

        # A step reads the escalated row, then pauses before it counts open escalations; the
        # maintainer's answer lands in between, so the step decides from a row that is stale.
        real, snapshots = step_module.read_snapshot, []
        reading, answered = asyncio.Event(), asyncio.Event()

        async def read_after_the_answer(rt, pr, head, reviews):
            if not reading.is_set():
                reading.set()
                await answered.wait()
            snapshots.append(await real(rt, pr, head, reviews))
            return snapshots[-1]

        async with h.rt.step_locks.hold(key):  # no other step of this PR runs meanwhile
            monkeypatch.setattr(step_module, "read_snapshot", read_after_the_answer)
            stale = asyncio.create_task(step_module._step(h.rt, key))
            await asyncio.wait_for(reading.wait(), 30)
            await h.sim.comment(REPO, number, "/converge answer Two more rounds, then stop.", user="maint")
            resumed = await h.wait_status(key, "waiting_review")
            answered.set()
            await asyncio.wait_for(stale, 30)
            after = await h.view(key)

        (snap,) = snapshots
        assert (snap.pr.status, snap.open_escalations) == ("escalated", 0)
        assert decide_step(snap).actions == (Heal(),), "the stale step decided to heal"
        # ...and its write found the PR no longer escalated: the answer's resume stands.
        assert (resumed.pr.status, resumed.pr.current_round, resumed.pr.max_rounds) == ("waiting_review", 2, 3)
        assert (after.pr.status, after.pr.current_round) == ("waiting_review", 2)
        assert after.pr.last_action == f"escalation #{esc.id} answered by @maint"
        assert after.pr.waiting_since == resumed.pr.waiting_since


async def _new_run(h, key: str, old: str):
    view = await h.view(key)
    return view if view.pr.process_key != old and view.run_state == "active" else None


async def _settled(h, key: str, comment_id: int):
    done = [c for c in await commands.for_pr(h.rt.db, key) if c.comment_id == comment_id and c.why != "received"]
    return done[0] if done else None


async def test_a_pr_closed_outside_ends_its_run_and_can_be_enrolled_again(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["push"])) as h:
        key, number = await open_and_enroll(h)  # no reviewer: the PR waits for a review
        first = await h.wait_status(key, "waiting_review")
        await h.sim.close_pr(REPO, number, actor="dev")

        closed = await h.wait_status(key, "abandoned")
        assert (closed.pr.status, closed.pr.outcome) == ("abandoned", "closed without merging")
        run = await runs.get_run(h.rt.db, first.pr.process_key)
        assert (run.state, run.reason) == ("terminated", "closed without merging")
        assert closed.resubmittable

        # Reopened and enrolled again: a new run starts, nobody is told it is already running.
        await h.sim.reopen_pr(REPO, number, actor="dev")
        again = await h.sim.comment(REPO, number, "/converge", user="maint")
        second = await h.wait_for("a new run", lambda: _new_run(h, key, first.pr.process_key))
        cmd = await h.wait_for("the command settled", lambda: _settled(h, key, again.id))
        assert (cmd.accepted, cmd.why) == (True, "done")
        await h.wait_status(key, "waiting_review")
        assert [r.state for r in await runs.runs_for(h.rt.db, key)] == ["terminated", "active"]
        assert second.pr.current_round == 1


async def test_a_pr_merged_outside_ends_its_run_and_a_resubmit_starts_a_new_one(tmp_path, db_url):
    from bot.engine.submit import Outcome, submit_pr
    from storage.keys import parse_pr_key

    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["push"])) as h:
        key, number = await open_and_enroll(h)
        first = await h.wait_status(key, "waiting_review")
        await h.sim.merge_pr(REPO, number, actor="maint")

        merged = await h.wait_status(key, "merged")
        assert merged.pr.outcome == "merged outside convergebot"
        run = await runs.get_run(h.rt.db, first.pr.process_key)
        assert (run.state, run.reason) == ("completed", "merged outside convergebot")

        result = await submit_pr(h.rt.db, parse_pr_key(key))
        assert result.outcome == Outcome.STARTED and result.process_key != first.pr.process_key
        # The new run's first poll reads the PR merged as well, and ends it the same way.

        async def second_ended():
            found = await runs.get_run(h.rt.db, result.process_key)
            return found if found.state != "active" else None

        ended = await h.wait_for("the new run to end", second_ended)
        assert (ended.state, ended.reason) == ("completed", "merged outside convergebot")


async def test_a_fix_job_for_a_pr_closed_while_it_waited_runs_no_fixer(tmp_path, db_url):
    """A PR closed, its webhook lost, while its fix job waits for a fixer worker: the job reads
    the PR closed, runs nothing and pushes nothing, and the run ends."""
    from sqlmodel import select

    from storage.models import Job

    fixer = HeldFixer(first_only=True)
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer, jobs={"fixer_workers": 1},
                                poller={"interval_seconds": 3600}) as h:
        h.sim.set_reviewer(REPO, steps(1, 0))
        await open_and_enroll(h, head="first")
        await h.wait_for("the first PR's fixer at work", fixer.at_work)
        key, number = await open_and_enroll(h, head="second")

        async def queued_fix():
            async with h.rt.db.session() as s:
                return (await s.exec(select(Job).where(Job.kind == "fix", Job.pr_key == key,
                                                       Job.status == "queued"))).first()

        await h.wait_for("the second PR's fix job queued", queued_fix)

        async def no_sync_in_hand():
            return not await jobs.in_hand(h.rt.db, key, kinds=("sync",))

        # Nothing but the fix job may read the PR after the close: a sync of its own (queued by
        # its webhooks, a step still settling) would read it closed and end the run first, and
        # the fix job would then be dropped as stale whether it reads the PR or not.
        h.sim.webhook_faults(drop_all=True)
        await h.wait_for("the second PR's syncs done", no_sync_in_hand)
        repo, pr = h.sim.pr(REPO, number)
        head = await h.sim.head_sha(repo, pr)
        await h.sim.close_pr(REPO, number, actor="dev")
        fixer.release.set()

        closed = await h.wait_status(key, "abandoned")
        assert closed.pr.outcome == "closed without merging"
        assert fixer.ran == [] and await h.sim.head_sha(repo, pr) == head
