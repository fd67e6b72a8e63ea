"""Loops nobody foresaw stay bounded: a remembered churn answer, a run past its write budget."""

from __future__ import annotations

import sys
import textwrap

from storage import jobs

from .harness import REPO, bot_on_simulator, due_soon, open_and_enroll, quiesce, steps

# Edits the file of every finding and says nothing about the threads: the review keeps finding
# something in the same file, so the rounds churn.
UNSETTLING_AGENT = textwrap.dedent('''
    import json, os, pathlib
    doc = json.load(open(os.environ["CONVERGEBOT_FINDINGS_FILE"]))
    for f in doc["findings"]:
        p = pathlib.Path(f["path"] or "CHANGES.md")
        p.write_text((p.read_text() if p.exists() else "") + "# tweak %s.%s\\n" % (doc["round"], doc["attempt"]))
    print(json.dumps({"status": "addressed", "summary": "tweaked"}))
''')


def _agent(tmp_path) -> dict:
    script = tmp_path / "agent.py"
    script.write_text(UNSETTLING_AGENT)
    return {"kind": "command", "command": [sys.executable, str(script)]}


async def test_after_a_churn_answer_the_run_moves_on_and_stays_bounded(tmp_path, sqlite_db_url):
    # SQLite only: the bound is the engine's, and the one-escalation race it can meet on
    # PostgreSQL is tests/integration/test_runaway_once.py's (the suite's longest e2e test).
    async with bot_on_simulator(tmp_path, sqlite_db_url, fixer_config=_agent(tmp_path)) as h:
        h.sim.set_reviewer(REPO, steps(1))  # one new finding in app/core.py every review, for ever
        key, number = await open_and_enroll(h, command="/converge start --rounds 6")
        await h.wait_status(key, "escalated", timeout=60)
        (churn,) = await h.escalations(key)
        assert churn.kind == "churn" and churn.round_no == 4
        await h.sim.comment(REPO, number, "/converge answer decline: the reviewer is wrong here", user="maint")

        # The answer is remembered: churn is not asked again, and the run goes on round by round
        # until its round cap asks the one question memory cannot answer.
        async def asked_again():
            return len(await h.escalations(key)) > 1

        await h.wait_for("the next escalation", asked_again, timeout=90)
        await quiesce(h)
        view = await h.view(key)
        kinds = [e.kind for e in await h.escalations(key)]
        assert kinds == ["churn", "round_cap"], kinds
        assert view.pr.current_round == 6
        attempts = {r.round_no: r.attempt for r in await h.rounds(key)}
        assert all(a == 0 for a in attempts.values()), attempts  # no reruns, let alone hundreds
        fixes = [j for j in await jobs.list_jobs(h.rt.db, key) if j.kind == "fix"]
        assert len(fixes) == 6
        comments = h.bot_comments(number)
        memory = [c for c in comments if "Answered from memory" in c["body"]]
        assert len(memory) == 1  # round 5; round 6 asks about the round cap instead
        assert len(comments) <= 6, [c["body"][:60] for c in comments]
        assert h.sim.duplicate_effects() == [] and h.sim.forced_pushes() == []


async def test_a_run_past_its_write_budget_is_paused_and_escalated_once(tmp_path, db_url):
    from bot.fixers import ScriptedFixer

    budget = {"comments_per_hour": 4}
    # Churn and the round cap are held off: a round's replies are written after its fix, so a
    # fast reviewer lets the rounds run ahead of the reply that meets the budget, and the same
    # file's findings every round (churn, at round 4) or the cap (8) could be escalated first.
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["push"]), budget=budget,
                                poller={"interval_seconds": 0.5},
                                convergence={"churn_rounds": 100, "max_rounds": 100}) as h:
        h.sim.set_reviewer(REPO, steps(3))  # three findings a review, each fixed and replied to
        key, number = await open_and_enroll(h)
        await h.wait_status(key, "escalated", timeout=60)
        # The writes settled (not the whole queue: the half-second poller keeps a sync of the
        # escalated PR queued or running most of the time, more so on a busy machine).
        await h.sim.settle()

        async def writes_settled():
            return not [j for j in await jobs.list_jobs(h.rt.db, key)
                        if j.kind == "effect" and j.status in ("queued", "running")
                        and j.run_at <= due_soon()]

        await h.wait_for("the PR's writes to settle", writes_settled)
        await h.sim.settle()
        escs = await h.escalations(key)
        assert len(escs) == 1, [(e.kind, e.question[:200]) for e in escs]
        (esc,) = escs
        assert esc.kind == "runaway" and "comments within the hour" in esc.question
        replies = [e for e in h.sim.effects("review_reply") if e["actor"] == "convergebot[bot]"]
        # Workers may each have passed the check at once: at most one write past the budget each.
        assert 4 <= len(replies) <= 4 + 3, len(replies)
        assert len([c for c in h.bot_comments(number) if "escalation #" in c["body"]]) == 1

        async def listed():
            return key in (await h.http.get("/readyz")).json()["paused_runaway"]

        await h.wait_for("/readyz to list the paused PR", listed)


async def test_an_answer_to_a_paused_run_buys_a_fresh_write_budget_that_is_enforced_again(tmp_path, db_url):
    from bot.fixers import ScriptedFixer

    budget = {"comments_per_hour": 4}
    # The pause comes from an effect while the next round's fixer works (or has pushed, its
    # progress check lost to the pause): the answer goes back to that round, whose check decides.
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["push"]), budget=budget,
                                poller={"interval_seconds": 0.5},
                                convergence={"churn_rounds": 100, "max_rounds": 100}) as h:
        h.sim.set_reviewer(REPO, steps(3))
        key, number = await open_and_enroll(h)
        await h.wait_status(key, "escalated", timeout=60)

        def ours():
            return [e for e in h.sim.effects("review_reply") if e["actor"] == "convergebot[bot]"]

        async def paused_twice():
            escs = [e for e in await h.escalations(key) if e.kind == "runaway"]
            return escs if len(escs) == 2 and escs[1].status == "open" else None

        first = len(ours())
        await h.sim.comment(REPO, number, "/converge answer go on", user="maint")
        # Fresh: the run writes again (the hour's replies before the answer no longer count)...
        escs = await h.wait_for("the second pause", paused_twice, timeout=60)
        # ...and the fresh budget is enforced: paused again once it is spent, not never.
        assert escs[0].status == "answered" and "comments within the hour" in escs[1].question
        assert len(ours()) - first >= 4, (first, len(ours()))


async def test_an_answer_while_the_paused_run_s_fixer_still_works_leaves_the_round_to_that_fixer(tmp_path, db_url):
    from bot.engine import write_budget

    from .harness import HeldFixer

    fixer = HeldFixer()
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer) as h:
        h.sim.set_reviewer(REPO, steps(1, 0))
        key, number = await open_and_enroll(h)
        await h.wait_for("the fixer at work", fixer.at_work)
        view = await h.view(key)
        # An effect of the run finds it over its write budget while its fixer works.
        await write_budget.pause_runaway(h.rt, key, view.pr.process_key, "99 GitHub writes within the hour")
        await h.wait_status(key, "escalated")
        await h.sim.comment(REPO, number, "/converge answer go on", user="maint")

        async def answered_and_calm():
            escs = await h.escalations(key)
            if not escs or escs[0].status != "answered":
                return False
            busy = [j for j in await jobs.list_jobs(h.rt.db, key)
                    if j.kind != "fix" and (j.status == "running" or (j.status == "queued" and j.run_at <= due_soon()))]
            return not busy

        await h.wait_for("the answer, and the steps it woke", answered_and_calm)
        # The round is the fixer's still: no check of it was queued while the fixer works (it
        # would read the unmoved head and call the round a husk).
        (rnd,) = await h.rounds(key)
        assert (rnd.status, rnd.attempt) == (None, 0)
        checks = [j.key for j in await jobs.list_jobs(h.rt.db, key) if j.kind == "progress_check"]
        assert not [k for k in checks if ":answer:" in k], checks
        assert (await h.view(key)).pr.status == "converging"

        fixer.release.set()
        await h.wait_status(key, "merged", timeout=60)
        rounds = await h.rounds(key)
        assert [(r.round_no, r.status) for r in rounds] == [(1, "addressed"), (2, "converged")]
        assert rounds[0].attempt == 0  # the fixer's one attempt: no rerun
        assert [e.kind for e in await h.escalations(key)] == ["runaway"]
