"""Husks, no-advance, churn, round cap, stalled reviews: every way a run escalates."""

from __future__ import annotations

from bot.effects.runner import run_effect
from bot.engine import outbox
from bot.engine.progress import progress_check
from bot.fixers import ScriptedFixer
from storage import jobs

from .harness import REPO, bot_on_simulator, open_and_enroll, quiesce, steps


async def test_husk_reruns_at_most_twice_then_escalates(tmp_path, db_url):
    fixer = ScriptedFixer(["husk"])
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer) as h:
        h.sim.set_reviewer(REPO, steps(2))
        key, number = await open_and_enroll(h)
        view = await h.wait_status(key, "escalated")
        assert [b for _, _, b in fixer.history] == ["husk", "husk", "husk"]
        (esc,) = await h.escalations(key)
        assert (esc.kind, esc.status, esc.round_no) == ("husk", "open", 1)
        assert view.pr.current_round == 1 and view.pr.husk_retries == 2

        async def posted():
            return [c for c in h.bot_comments(number) if f"convergebot escalation #{esc.id}" in c["body"]]

        # The comment follows the escalation's write; once there it is there once.
        (comment,) = await h.wait_for("the escalation comment", posted)
        assert "@maint" in comment["body"] and "/converge answer" in comment["body"]
        await quiesce(h)
        assert len(await posted()) == 1
        # The job that escalated runs again (at-least-once), and the posting step too: still one.
        checks = [j for j in await jobs.list_jobs(h.rt.db, key) if j.kind == "progress_check" and j.status == "done"]
        await progress_check(h.rt, checks[-1])
        (posting,) = [j for j in await jobs.list_jobs(h.rt.db, key)
                      if j.kind == "effect" and f"escalation:{esc.id}" in j.key]
        await run_effect(h.rt, posting)
        await quiesce(h)
        assert len(await posted()) == 1
        assert len(await h.escalations(key)) == 1


async def test_no_advance_escalates_at_once(tmp_path, db_url):
    fixer = ScriptedFixer(["noop"])
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer) as h:
        h.sim.set_reviewer(REPO, steps(1))
        key, _ = await open_and_enroll(h)
        await h.wait_status(key, "escalated")
        assert len(fixer.history) == 1
        (esc,) = await h.escalations(key)
        assert esc.kind == "no_advance" and "without changing the branch" in esc.question


async def test_churn_in_one_file_escalates(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["push"])) as h:
        h.sim.set_reviewer(REPO, steps(1))  # one new finding in app/core.py every round
        key, _ = await open_and_enroll(h)
        view = await h.wait_status(key, "escalated", timeout=60)
        (esc,) = await h.escalations(key)
        assert esc.kind == "churn" and "app/core.py" in esc.question
        assert view.pr.current_round == 4
        assert [r.status for r in await h.rounds(key)] == ["addressed"] * 4


async def test_round_cap_escalates(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["push"])) as h:
        h.sim.set_reviewer(REPO, steps(1))
        key, _ = await open_and_enroll(h, command="/converge start --rounds 2")
        view = await h.wait_status(key, "escalated", timeout=60)
        (esc,) = await h.escalations(key)
        assert esc.kind == "round_cap" and "2 rounds" in esc.question
        assert (view.pr.current_round, view.pr.max_rounds) == (2, 2)


async def test_review_never_arrives_one_nudge_per_window_then_escalation(tmp_path, db_url):
    from datetime import datetime, timedelta

    conv = {"review_wait_timeout_seconds": 4.5, "nudge_window_seconds": 2}
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["push"]), convergence=conv,
                                poller={"interval_seconds": 0.25}) as h:
        key, number = await open_and_enroll(h)  # no reviewer script: Copilot never answers
        view = await h.wait_status(key, "escalated", timeout=30)

        async def asked():  # every request decided has been made (or found unneeded)
            return not await outbox.pending(h.rt.db, key, "request_review")

        await h.wait_for("the review requests to be made", asked)
        # Nudges are decided at most once per 2 s window; how many fit in 4.5 s depends on how
        # fast the machine polls, never more than two, and never two within one window.
        nudged = sorted(datetime.fromisoformat(j.key.rsplit(":nudge:", 1)[1])
                        for j in await jobs.list_jobs(h.rt.db, key) if ":nudge:" in j.key)
        assert 1 <= len(nudged) <= 2, nudged
        assert all(b - a >= timedelta(seconds=2) for a, b in zip(nudged, nudged[1:], strict=False))
        # Each one looked first and found Copilot's review still pending: GitHub was asked once.
        routes = h.sim.counters.snapshot()["routes"]
        asked = sum(sum(by_status.values()) for route, by_status in routes.items()
                    if route.startswith("POST ") and route.endswith("/copilot-code-review"))
        assert asked == 1, routes
        (esc,) = await h.escalations(key)
        assert esc.kind == "review_stalled"
        assert view.pr.status == "escalated"


async def test_the_poller_heals_an_escalated_pr_whose_answer_write_was_lost(tmp_path, db_url):
    from sqlalchemy import update

    from storage.models import Escalation

    conv = {"escalation_heal_grace_seconds": 1}
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["noop", "push"]), convergence=conv,
                                poller={"interval_seconds": 0.5}) as h:
        h.sim.set_reviewer(REPO, steps(1, 0))
        key, _ = await open_and_enroll(h)
        await h.wait_status(key, "escalated")
        # The answer reached the escalation row but not the PR row (a crash in between).
        async with h.rt.db.session() as s:
            await s.exec(update(Escalation).where(Escalation.pr_key == key).values(
                status="answered", answer="go on", answered_by="maint"))
        view = await h.wait_status(key, "merged", timeout=30)
        assert [e.status for e in await h.escalations(key)] == ["answered"]
        assert view.pr.outcome == "merged"


async def test_an_open_escalation_is_never_healed(tmp_path, db_url):
    conv = {"escalation_heal_grace_seconds": 0.5}
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["noop", "push"]), convergence=conv,
                                poller={"interval_seconds": 0.25}) as h:
        h.sim.set_reviewer(REPO, steps(1, 0))
        key, _ = await open_and_enroll(h)
        await h.wait_status(key, "escalated")
        polls = h.rt.health.last_poll_at
        await h.wait_for("three more polls", lambda: _later(h, polls, 0.75))
        assert (await h.view(key)).derived_status == "escalated"


async def _later(h, since, seconds: float) -> bool:
    last = h.rt.health.last_poll_at
    return last is not None and since is not None and (last - since).total_seconds() >= seconds
