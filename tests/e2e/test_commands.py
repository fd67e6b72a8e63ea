"""Maintainer commands on the PR: answers, refusals, ignored comments, adjudication memory."""

from __future__ import annotations

from bot.fixers import ScriptedFixer
from storage import adjudications, commands, jobs

from .harness import REPO, Recording, bot_on_simulator, open_and_enroll, steps

QUESTION = "Keep the old API name?"


async def test_answers_refusals_and_memory(tmp_path, db_url):
    fixer = Recording(ScriptedFixer([f"ask:{QUESTION}", "push", f"ask:{QUESTION}", "push"]))
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer) as h:
        h.sim.set_reviewer(REPO, steps(1, 1, 0))
        key, number = await open_and_enroll(h)
        await h.wait_status(key, "escalated")
        (esc,) = await h.escalations(key)
        assert (esc.kind, esc.question) == ("needs_input", QUESTION)

        # A read-only user is refused with a reply; nothing changes.
        refused = await h.sim.comment(REPO, number, "/converge answer rename it", user="reader")
        await h.wait_for("the refusal", lambda: _settled(h, refused.id))
        await h.wait_for("the refusal's reply", lambda: _replied(h, number, "write access"))
        # An edited comment and the bot's own comments are never commands.
        edited = await h.sim.comment(REPO, number, "thinking about it", user="maint")
        await _a_second_later(h, edited)  # GitHub stamps to the second: an edit shows from the next
        await h.sim.edit_comment(REPO, edited.id, "/converge answer rename it", user="maint")
        await h.sim.comment(REPO, number, "/converge stop", user="convergebot[bot]")
        await h.sim.settle()
        await h.wait_status(key, "escalated")
        assert (await h.escalations(key))[0].status == "open"
        handled = [(c.author, c.verb, c.accepted) for c in await commands.for_pr(h.rt.db, key)]
        assert handled == [("maint", "start", True), ("reader", "answer", False)]

        # The maintainer answers: the round resumes with the answer handed to the fixer.
        await h.sim.comment(REPO, number, "/converge answer Keep it: callers depend on it.", user="maint")
        view = await h.wait_status(key, "merged", timeout=60)
        escs = await h.escalations(key)
        assert [(e.status, e.answered_by) for e in escs] == [("answered", "maint")]
        second = fixer.requests[1]
        assert any("@maint" in i and "callers depend on it" in i for i in second.instructions)
        # Round 2 asked the same question: answered from memory, attributed, not asked again.
        fourth = fixer.requests[3]
        assert any("@maint" in i and "callers depend on it" in i for i in fourth.instructions)
        memory = [c for c in h.bot_comments(number) if "Answered from memory" in c["body"]]
        assert len(memory) == 1 and "@maint" in memory[0]["body"]
        assert view.pr.current_round == 3


async def test_forget_revokes_the_remembered_answer(tmp_path, db_url):
    fixer = ScriptedFixer([f"ask:{QUESTION}", "push", f"ask:{QUESTION}"])
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer) as h:
        h.sim.set_reviewer(REPO, steps(1, 1, delay=2.0))
        key, number = await open_and_enroll(h)
        await h.wait_status(key, "escalated", timeout=30)
        await h.sim.comment(REPO, number, "/converge answer Keep it.", user="maint")

        async def in_round_two():
            v = await h.view(key)
            return v.pr.current_round == 2

        await h.wait_for("round 2", in_round_two)
        forget = await h.sim.comment(REPO, number, "/converge forget", user="maint")
        await h.wait_for("forget handled", lambda: _settled(h, forget.id))
        assert await adjudications.live_for(h.rt.db, key) == []
        # The review arrives, the fixer asks the same question again: it is asked, not recalled.
        await h.wait_status(key, "escalated", timeout=30)
        escs = await h.escalations(key)
        assert [e.status for e in escs] == ["answered", "open"]
        assert not [c for c in h.bot_comments(number) if "Answered from memory" in c["body"]]


async def _settled(h, comment_id: int) -> bool:
    async with h.rt.db.session() as s:
        from sqlmodel import select

        from storage.models import Command

        row = (await s.exec(select(Command).where(Command.comment_id == comment_id))).first()
    return row is not None and row.why != "received"


async def test_the_cli_answers_an_escalation_and_the_running_bot_resumes(tmp_path, db_url):
    import asyncio
    import sys

    from ..integration.test_cli import cli_env

    fixer = Recording(ScriptedFixer([f"ask:{QUESTION}", "push"]))
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer) as h:
        h.sim.set_reviewer(REPO, steps(1, 0))
        key, _ = await open_and_enroll(h)
        await h.wait_status(key, "escalated")
        env = cli_env(db_url) | {"CONVERGEBOT_GITHUB_API_URL": h.sim_url, "CONVERGEBOT_GITHUB_TOKEN": "t",
                                 "CONVERGEBOT_FIXER_KIND": "fake"}  # as the running bot
        p = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", "answer", key, "Keep the name.", "--by", "alice", env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(p.communicate(), 60)
        assert p.returncode == 0, err.decode()[-2000:]
        await h.wait_status(key, "merged", timeout=30)
        assert [(e.status, e.answered_by) for e in await h.escalations(key)] == [("answered", "alice")]
        assert any("@alice" in i and "Keep the name." in i for i in fixer.requests[1].instructions)


async def _replied(h, number: int, text: str) -> bool:
    return any(text in c["body"] for c in h.bot_comments(number))


async def test_an_answer_whose_webhook_is_lost_is_found_by_the_poller(tmp_path, db_url):
    fixer = Recording(ScriptedFixer([f"ask:{QUESTION}", "push"]))
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer, poller={"interval_seconds": 0.5}) as h:
        h.sim.set_reviewer(REPO, steps(1, 0))
        key, number = await open_and_enroll(h)
        await h.wait_status(key, "escalated")
        await h.sim.settle()
        # The answer's delivery never arrives. Only around the answer: "the next delivery" could
        # be an echo of one of the bot's own writes still in flight.
        h.sim.webhook_faults(drop_all=True)
        answer = await h.sim.comment(REPO, number, "/converge answer Keep it.", user="maint")
        h.sim.webhook_faults(drop_all=False)
        view = await h.wait_status(key, "merged", timeout=30)
        (delivery,) = [d for d in h.sim.deliveries
                       if d.event == "issue_comment" and d.payload["comment"]["id"] == answer.id]
        assert delivery.dropped
        handled = [(c.comment_id, c.verb, c.accepted) for c in await commands.for_pr(h.rt.db, key)]
        assert handled[-1] == (answer.id, "answer", True) and len(handled) == 2
        assert any("Keep it." in i for i in fixer.requests[1].instructions)
        assert view.pr.outcome == "merged"


async def test_an_edited_comment_is_never_recovered_as_a_command(tmp_path, db_url):
    fixer = ScriptedFixer([f"ask:{QUESTION}", "push"])
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer, poller={"interval_seconds": 0.25}) as h:
        h.sim.set_reviewer(REPO, steps(1, 0))
        key, number = await open_and_enroll(h)
        await h.wait_status(key, "escalated")
        edited = await h.sim.comment(REPO, number, "thinking about it", user="maint")
        await _a_second_later(h, edited)  # GitHub stamps to the second: an edit shows from the next
        await h.sim.edit_comment(REPO, edited.id, "/converge answer rename it", user="maint")
        # The escalated PR's steps read its comments several times meanwhile.
        ticks: list = []
        start = h.rt.health.last_poll_at

        async def polled_thrice():
            now = h.rt.health.last_poll_at
            if now != start and (not ticks or ticks[-1] != now):
                ticks.append(now)
            return len(ticks) >= 3

        await h.wait_for("three polls", polled_thrice)

        async def no_command_waiting():
            return not [j for j in await jobs.list_jobs(h.rt.db, key)
                        if j.kind == "command" and j.status in ("queued", "running")]

        await h.wait_for("command jobs to be handled", no_command_waiting)
        assert (await h.view(key)).derived_status == "escalated"
        assert edited.id not in [c.comment_id for c in await commands.for_pr(h.rt.db, key)]
        # The recovery never queued it: it reads the listing's stamps before it queues a job.
        assert f"cmd:{edited.id}" not in [j.key for j in await jobs.list_jobs(h.rt.db, key)]


async def _a_second_later(h, comment) -> None:
    from datetime import UTC, datetime

    async def later():
        return datetime.now(UTC).replace(microsecond=0) > comment.created_at.replace(microsecond=0)

    await h.wait_for("the next second", later)


async def test_a_command_acts_on_the_comment_its_delivery_carried_and_reads_a_long_one(tmp_path, db_url):
    """The signed delivery holds the comment as it was created: the job does not read it again
    (one rate-limited request per command). A comment too long to keep in the job is read."""
    reads = dict(method="GET", route="/repos/{owner}/{repo}/issues/comments/{comment_id}")
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["noop"])) as h:
        pr = await h.sim.open_pr(REPO, title="t", head="feat", author="dev", files={"app/x.py": "x = 1\n"})
        key = f"{REPO}#{pr.number}"
        h.sim.counters.reset()
        short = await h.sim.comment(REPO, pr.number, "/converge status", user="maint")
        await h.wait_for("the status command", lambda: _settled(h, short.id))
        assert h.sim.counters.get(**reads) == 0
        long = await h.sim.comment(REPO, pr.number, "/converge status\n\n" + "context " * 600, user="maint")
        await h.wait_for("the long command", lambda: _settled(h, long.id))
        assert h.sim.counters.get(**reads) == 1
        handled = [(c.author, c.verb, c.accepted) for c in await commands.for_pr(h.rt.db, key)]
        assert handled == [("maint", "status", True), ("maint", "status", True)]


async def test_a_late_command_job_reads_its_comment_and_a_deleted_or_edited_one_is_no_command(tmp_path, db_url):
    """A redelivery hours later (or a backlog) carries the comment as it was posted; by then it
    may have been deleted or edited. A job that runs over two minutes after the posting reads
    the comment again: gone or edited, it is no command."""
    import json
    from datetime import timedelta

    from bot.engine.commands import handle_command
    from storage.models import Job, utcnow

    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["noop"])) as h:
        h.sim.webhook_faults(drop_all=True)
        pr = await h.sim.open_pr(REPO, title="t", head="feat", author="dev", files={"app/x.py": "x = 1\n"})
        key = f"{REPO}#{pr.number}"
        deleted = await h.sim.comment(REPO, pr.number, "/converge status", user="maint")
        edited = await h.sim.comment(REPO, pr.number, "/converge status", user="maint")
        kept = await h.sim.comment(REPO, pr.number, "/converge status", user="maint")
        await h.sim.delete_comment(REPO, deleted.id, user="maint")
        await _a_second_later(h, edited)
        await h.sim.edit_comment(REPO, edited.id, "/converge stop", user="maint")  # no command either
        posted = (utcnow() - timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
        for comment in (deleted, edited, kept):
            carried = {"body": "/converge status", "user": {"login": "maint", "type": "User"},
                       "created_at": posted, "updated_at": posted}
            # Queued now, on its first try: what makes it late is the comment's age alone.
            await handle_command(h.rt, Job(kind="command", key=f"cmd:{comment.id}", pr_key=key, attempts=1,
                                           created_at=utcnow(),
                                           payload=json.dumps({"comment_id": comment.id, "kind": "issue",
                                                               "comment": carried})))
        handled = [(c.comment_id, c.verb) for c in await commands.for_pr(h.rt.db, key)]
        assert handled == [(kept.id, "status")]
