"""A progress check whose decision lost its fence writes nothing of it.

A check reads the row and the branch, then decides; a `/converge stop`, or the write budget's
pause, may land in between. Its writes are fenced on the run, the status and the round it read,
and what goes with each (the next round and its review request, the rerun's fixer, a comment
saying memory answered) is written only by the check whose fenced write won. Here the check is
paused between its decision and its writes, the stop or pause is handled meanwhile, then the
check goes on from its stale read (tests/guards/progress.toml names the guard each test kills).
"""

from __future__ import annotations

import asyncio

from sqlmodel import select

from bot.engine import progress as progress_module
from bot.engine.write_budget import RUNAWAY, pause_runaway
from bot.fixers import ScriptedFixer
from storage.models import Job

from .harness import REPO, bot_on_simulator, open_and_enroll, quiesce, steps

QUIET = {"poller": {"interval_seconds": 3600}}  # only webhooks and jobs move things
QUESTION = "Keep the old API name?"


class _PausedCheck:
    """The first progress check whose decision is `kind` (and, with `remembered`, one memory
    answered) pauses between its decision and its writes, until released."""

    def __init__(self, monkeypatch, kind: str, *, remembered: bool = False) -> None:
        self.kind, self.remembered = kind, remembered
        self.real = progress_module._record
        self.decided, self.release = asyncio.Event(), asyncio.Event()
        self.task: asyncio.Task | None = None
        monkeypatch.setattr(progress_module, "_record", self._record)

    async def _record(self, rt, d):
        if (self.task is None and d.outcome.kind == self.kind
                and (d.outcome.remembered is not None) == self.remembered):
            self.task = asyncio.current_task()
            self.decided.set()
            await self.release.wait()
        return await self.real(rt, d)

    async def paused(self) -> None:
        await asyncio.wait_for(self.decided.wait(), 60)

    async def go_on(self) -> None:
        """Release the paused check and wait until it has written (or lost)."""
        assert self.task is not None
        self.release.set()
        await asyncio.wait_for(asyncio.shield(self.task), 30)


async def _stop_while_paused(h, key, number: int, check: _PausedCheck) -> None:
    await check.paused()
    await h.sim.comment(REPO, number, "/converge stop", user="maint")
    await h.wait_status(key, "abandoned")
    await check.go_on()
    await quiesce(h)
    assert (await h.view(key)).derived_status == "abandoned"


async def _jobs(h, key, kind: str) -> list[str]:
    async with h.rt.db.read_session() as s:
        return list((await s.exec(select(Job.key).where(Job.pr_key == key, Job.kind == kind).order_by(Job.id))).all())


def _review_requests(h, number: int) -> list[dict]:
    return [e for e in h.sim.effects() if e.get("number") == number
            and e["kind"] in ("review_requested", "copilot_review_requested")]


async def test_a_check_whose_advance_lost_to_a_stop_starts_no_round_and_asks_no_review(
        tmp_path, db_url, monkeypatch):
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["push"]), **QUIET) as h:
        h.sim.set_reviewer(REPO, steps(1, 0))
        check = _PausedCheck(monkeypatch, "advance")
        key, number = await open_and_enroll(h)
        # The fixer pushed, and its check decided round 1 addressed; a maintainer stops the run
        # before the check writes.
        await check.paused()
        asked = len(_review_requests(h, number))
        assert asked >= 1  # round 1's review
        await _stop_while_paused(h, key, number, check)

        (rnd,) = await h.rounds(key)
        assert (rnd.round_no, rnd.status, rnd.ended_at) == (1, None, None), "the lost check moved the round on"
        assert len(_review_requests(h, number)) == asked, "a review was asked for a stopped run"


async def test_a_check_answered_from_memory_whose_rerun_lost_to_a_pause_says_nothing_and_reruns_nothing(
        tmp_path, db_url, monkeypatch):
    fixer = ScriptedFixer([f"ask:{QUESTION}", "push", f"ask:{QUESTION}", "push"])
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer, **QUIET) as h:
        h.sim.set_reviewer(REPO, steps(1, 1, 0))
        check = _PausedCheck(monkeypatch, "rerun", remembered=True)
        key, number = await open_and_enroll(h)
        await h.wait_status(key, "escalated")
        await h.sim.comment(REPO, number, "/converge answer Keep it: callers depend on it.", user="maint")
        # Round 2's fixer asks the same question: its check answers it from memory and would rerun
        # the round with the answer. Before it writes, an effect of the run meets the write
        # budget and the run is paused (escalated, still active), as the effect runner does.
        await check.paused()
        pk = (await h.view(key)).pr.process_key
        await pause_runaway(h.rt, key, pk, "too many comments in an hour")
        await h.wait_status(key, "escalated")
        await check.go_on()
        await quiesce(h)

        view = await h.view(key)
        assert (view.pr.process_key, view.derived_status) == (pk, "escalated")
        assert [(e.kind, e.status) for e in await h.escalations(key)] == [
            ("needs_input", "answered"), (RUNAWAY, "open")]
        assert not [c for c in h.bot_comments(number) if "Answered from memory" in c["body"]], \
            "memory was said to answer a question the lost check never acted on"
        rounds = {r.round_no: r for r in await h.rounds(key)}
        assert (rounds[2].attempt, rounds[2].status) == (0, None), "the lost check reran the round"
        assert [j for j in await _jobs(h, key, "fix") if j.startswith(f"fix:{pk}:2:")] == [f"fix:{pk}:2:0"]


async def test_a_check_whose_escalation_lost_to_a_stop_leaves_the_round_open(tmp_path, db_url, monkeypatch):
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["noop"]), **QUIET) as h:
        h.sim.set_reviewer(REPO, steps(1))
        check = _PausedCheck(monkeypatch, "escalate")
        key, number = await open_and_enroll(h)
        # The fixer changed nothing: its check decided to ask the maintainers; a maintainer
        # stops the run before the check writes.
        await _stop_while_paused(h, key, number, check)

        assert await h.escalations(key) == []
        (rnd,) = await h.rounds(key)
        assert (rnd.status, rnd.ended_at) == (None, None), "the lost check ended the round of a stopped run"
