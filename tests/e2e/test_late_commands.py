"""A command takes effect only on the moment it was written for.

A redelivery, the repository scan or the recovery on an escalated PR may hand a maintainer's
comment to the bot hours after it was written. By then the run it was written for may have
ended and another begun, or its escalation been answered and another asked: the late command
changes nothing, is recorded as not accepted, and gets one reply saying why.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from bot.engine.commands import answer, handle_command
from bot.engine.enroll import enroll
from bot.engine.recover import recover_commands
from bot.engine.submit import abandon_pr
from bot.fixers import ScriptedFixer
from bot.intake.scan import scan
from bot.rules.commands import STAMP_SLACK, Command
from simulator import ThreadSpec
from simulator.state import IssueComment
from storage import commands, runs
from storage.keys import PrKey, parse_pr_key
from storage.models import Job, utcnow

from .harness import COPILOT, REPO, Harness, bot_on_simulator, open_and_enroll, steps


async def _lost(h: Harness, number: int, body: str) -> IssueComment:
    """A maintainer's command whose delivery never arrives."""
    await h.sim.settle()
    h.sim.webhook_faults(drop_all=True)
    comment = await h.sim.comment(REPO, number, body, user="maint")
    h.sim.webhook_faults(drop_all=False)
    return comment


async def _past(h: Harness, comment: IssueComment) -> None:
    """Until what begins next begins after the comment, on any reading of its stamp."""
    moment = comment.created_at.replace(microsecond=0) + STAMP_SLACK + timedelta(seconds=1)
    await h.wait_for("the comment's moment to pass", lambda: _after(moment))


async def _after(moment) -> bool:
    return utcnow() > moment


async def _delivered_late(h: Harness, key: PrKey, comment: IssueComment) -> None:
    """The command's job as a net hands it over late (it reads the comment), twice: a second
    net finding the same comment must not reply again."""
    job = Job(kind="command", key=f"cmd:{comment.id}", pr_key=key, attempts=1,
              payload=json.dumps({"comment_id": comment.id, "kind": "issue"}))
    await handle_command(h.rt, job)
    await handle_command(h.rt, job)


async def _one_reply(h: Harness, number: int, comment: IssueComment, *words: str) -> None:
    """Exactly one reply to `comment`, through the outbox, with `words` in it."""
    marker = f"convergebot:cmd:{comment.id}"

    async def replied():
        return [c for c in h.bot_comments(number) if marker in c["body"]]

    (reply,) = await h.wait_for("the reply", replied)
    await h.sim.settle()
    assert len(await replied()) == 1
    assert all(w in reply["body"] for w in words), reply["body"]


async def _handled(h: Harness, key: PrKey, comment: IssueComment) -> tuple[str, bool]:
    (row,) = [c for c in await commands.for_pr(h.rt.db, key) if c.comment_id == comment.id]
    return row.verb, row.accepted


@pytest.mark.parametrize("verb", ["stop", "merge", "retry"])
async def test_a_command_written_for_an_earlier_run_does_nothing_to_the_next(tmp_path, db_url, verb):
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["noop"])) as h:
        # No reviewer answers: the runs below wait in `waiting_review` for as long as the test takes.
        key, number = await open_and_enroll(h)
        await h.wait_status(key, "waiting_review")
        late = await _lost(h, number, f"/converge {verb}")
        # The run it was written for ends; a maintainer starts another.
        assert await abandon_pr(h.rt.db, key, "stopped from the CLI")
        await _past(h, late)
        await h.sim.comment(REPO, number, "/converge", user="maint")

        async def second_run():
            found = await runs.runs_for(h.rt.db, key)
            return found if len(found) == 2 else None

        first, second = await h.wait_for("the second run", second_run)
        before = await h.wait_status(key, "waiting_review")
        assert before.pr.process_key == second.process_key

        await _delivered_late(h, key, late)
        await _one_reply(h, number, late, f"`/converge {verb}`", "earlier run", "nothing was changed")
        assert await _handled(h, key, late) == (verb, False)
        after = await h.view(key)
        assert after is not None and after.derived_status == "waiting_review"
        assert after.pr.process_key == second.process_key
        assert (after.pr.merge_approved, after.pr.last_action) == (False, before.pr.last_action)
        assert (await runs.get_run(h.rt.db, second.process_key)).state == "active"


async def test_a_converge_written_while_the_run_was_active_starts_nothing_once_it_merged(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["noop"])) as h:
        key, number = await open_and_enroll(h)
        await h.wait_status(key, "waiting_review")
        late = await _lost(h, number, "/converge")
        await _past(h, late)  # a merge in the comment's own second could have come first
        await h.sim.merge_pr(REPO, number, actor="maint")
        await h.wait_status(key, "merged")

        await _delivered_late(h, key, late)
        await _one_reply(h, number, late, "has since ended (merged)", "nothing was started")
        assert await _handled(h, key, late) == ("start", False)
        assert len(await runs.runs_for(h.rt.db, key)) == 1
        assert (await h.view(key)).derived_status == "merged"


async def test_an_answer_written_for_an_answered_escalation_does_not_answer_the_next(tmp_path, db_url,
                                                                                     monkeypatch):
    import bot.engine.step as step

    # GitHub's comment listing lags behind the lost answer until the second question is asked:
    # the escalated PR's steps would otherwise recover it while its escalation is open (on time).
    listing = {"lags": True}

    async def lagging(rt, pr):
        return 0 if listing["lags"] else await recover_commands(rt, pr)

    monkeypatch.setattr(step, "recover_commands", lagging)
    fixer = ScriptedFixer(["ask:Keep the old name?", "push", "ask:Split the module?"])
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer) as h:
        h.sim.set_reviewer(REPO, steps(1, 1, delay=0.2))
        key, number = await open_and_enroll(h)
        await h.wait_status(key, "escalated")
        (first,) = await h.escalations(key)
        late = await _lost(h, number, "/converge answer Keep it.")
        await _past(h, late)  # the next question will be asked after the comment was written
        # Someone answers the first question another way (the CLI): the run goes on.
        view = await h.view(key)
        assert await answer(h.rt, view.pr, Command("answer", text="Rename it."), "alice") == (True, None)
        h.rt.wake_workers()

        async def second_question():
            escs = await h.escalations(key)
            return escs if len(escs) == 2 and escs[1].status == "open" else None

        answered, asked = await h.wait_for("the second question", second_question, timeout=60)
        assert (answered.id, answered.status, answered.answered_by) == (first.id, "answered", "alice")

        listing["lags"] = False  # the recovery finds it now, and so does another net
        await _delivered_late(h, key, late)
        await _one_reply(h, number, late, f"escalation #{asked.id}", "Answer the open question again")
        assert await _handled(h, key, late) == ("answer", False)
        escs = await h.escalations(key)
        assert [(e.status, e.answer) for e in escs] == [("answered", "Rename it."), ("open", None)]
        assert (await h.view(key)).derived_status == "escalated"


async def test_a_label_removed_since_enrolls_nothing(tmp_path, db_url):
    """A `labeled` delivery lost and handed over late, or the scan reading the repository after
    the label was taken off: the PR is read as it is now, and a label no longer on it never was."""
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["noop"]),
                                scan={"repositories": [REPO]}) as h:
        removed = await h.sim.open_pr(REPO, title="removed", head="removed", author="dev",
                                      files={"app/core.py": "def f():\n    return 2\n"})
        kept = await h.sim.open_pr(REPO, title="kept", head="kept", author="dev",
                                   files={"app/util.py": "X = 2\n"})
        await h.sim.settle()
        h.sim.webhook_faults(drop_all=True)
        await h.sim.add_labels(REPO, removed.number, ["converge"], actor="maint")
        await h.sim.add_labels(REPO, kept.number, ["converge"], actor="maint")
        await h.sim.remove_label(REPO, removed.number, "converge", actor="maint")
        await h.sim.settle()
        h.sim.webhook_faults(drop_all=False)
        removed_key = parse_pr_key(f"{REPO}#{removed.number}")
        kept_key = parse_pr_key(f"{REPO}#{kept.number}")

        # The lost `labeled` delivery's job, run late.
        await enroll(h.rt, Job(kind="enroll", key=f"enroll:{removed_key}:late", pr_key=removed_key, payload="{}"))
        assert await h.view(removed_key) is None
        # The scan: the PR that still carries the label enrolls, the other does not.
        report = await scan(h.rt)
        assert report.enrolls == 1
        await h.wait_status(kept_key, "waiting_review", "converging")
        assert await h.view(removed_key) is None


async def test_a_retry_written_in_an_earlier_round_does_not_restart_the_next(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["push", "noop", "noop"])) as h:
        key, number = await open_and_enroll(h)
        await h.wait_status(key, "waiting_review")  # round 1: no reviewer answers yet
        late = await _lost(h, number, "/converge retry")
        await _past(h, late)
        # Round 1's review comes after the retry was written; the reviewer answers every later round.
        h.sim.set_reviewer(REPO, steps(1))
        await h.sim.submit_review(REPO, number, user=COPILOT, body="Copilot reviewed and generated 1 comments.",
                                  threads=[ThreadSpec(path="app/core.py", line=1, body="finding 0 of review 0")])
        # Round 1 pushed; round 2 made no progress and asks.
        before = await h.wait_status(key, "escalated", timeout=60)
        assert before.pr.current_round == 2
        (round_two,) = [r for r in await h.rounds(key) if r.round_no == 2]
        assert round_two.started_at > late.created_at.replace(microsecond=0) + STAMP_SLACK

        await _delivered_late(h, key, late)
        await _one_reply(h, number, late, "before round 2 started", "nothing was retried")
        assert await _handled(h, key, late) == ("retry", False)
        after = await h.view(key)
        assert (after.derived_status, after.pr.current_round, after.pr.last_action) == (
            "escalated", 2, before.pr.last_action)
        assert [e.status for e in await h.escalations(key)] == ["open"]
