"""A maintainer's command is acted on once, and never one of the bot's own comments.

The job key (`cmd:<comment id>`) keeps a webhook, its redelivery, the scan and the recovery to
one job while that job's row exists; past it (the row pruned, a redelivery days later) the
command's audit row is what says the comment was handled (`storage/commands.py`, `claim`). A
try that died after its claim is taken up by the job's retry. The bot's own comments are never
commands: as a GitHub App it writes as a `[bot]` (type "Bot"); with a token it writes as a plain
user, and only its login (`github.bot_login`) tells its comments from a maintainer's.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

from bot.fixers import ScriptedFixer
from simulator import Simulator, SimulatorServer
from storage import commands, deliveries, jobs, runs
from storage.models import Job, utcnow

from ..helpers import polled, until
from ..serving import WEBHOOK_SECRET, serving
from .harness import (
    FILES,
    REPO,
    Harness,
    bot_config,
    bot_on_simulator,
    open_and_enroll,
    quiesce,
    steps,
)

PERMISSION = r"/repos/acme/app/collaborators/maint/permission"


async def _row(h, comment_id: int):
    return next((c for c in await commands.for_pr(h.rt.db, f"{REPO}#1") if c.comment_id == comment_id), None)


async def _settled(h, comment_id: int):
    row = await _row(h, comment_id)
    return row if row is not None and row.why != "received" else None


async def _job(h, comment_id: int) -> Job | None:
    return next((j for j in await jobs.list_jobs(h.rt.db) if j.key == f"cmd:{comment_id}"), None)


async def _job_ended(h, comment_id: int) -> Job | None:
    job = await _job(h, comment_id)
    return job if job is not None and job.status in ("done", "failed") else None


def _reactions(h, comment_id: int) -> list[str]:
    return [e["content"] for e in h.sim.effects("reaction") if e.get("comment_id") == comment_id]


def _replies_to(h, number: int, comment_id: int) -> list[str]:
    return [c["body"] for c in h.bot_comments(number) if f"convergebot:cmd:{comment_id}" in c["body"]]


async def _marked(h, comment_id: int) -> list[Job]:
    """The outbox's effects that reply to the comment."""
    return [j for j in await jobs.list_jobs(h.rt.db) if f"convergebot:cmd:{comment_id}" in j.payload]


async def _attempt(h, key) -> int:
    return (await h.rounds(key))[-1].attempt


# -- once: a settled comment is not acted on again; a try that died after its claim is retried ----


async def test_a_settled_command_whose_delivery_comes_back_is_not_acted_on_again(tmp_path, db_url):
    # No reviewer answers: the run waits for its review as long as the test takes.
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["noop"]),
                                poller={"interval_seconds": 3600}) as h:
        key, number = await open_and_enroll(h)
        await h.wait_status(key, "waiting_review")
        retry = await h.sim.comment(REPO, number, "/converge retry", user="maint")
        await h.wait_for("the retry settled", lambda: _settled(h, retry.id))
        await quiesce(h)
        await h.wait_status(key, "waiting_review")
        first = await _settled(h, retry.id)
        assert (first.verb, first.accepted, first.why) == ("retry", True, "done")
        # Obeyed without a word: its +1 says so, and no reply is queued or posted.
        assert _replies_to(h, number, retry.id) == [] and await _marked(h, retry.id) == []
        attempt = await _attempt(h, key)

        # Days later: the job's row and the delivery's are pruned, and GitHub delivers the
        # comment again (a redelivery asked by hand): a new job for the same comment.
        later = utcnow() + timedelta(seconds=1)
        assert await jobs.prune(h.rt.db, later) and await deliveries.prune(h.rt.db, later)
        assert await _job(h, retry.id) is None
        (entry,) = [e for e in h.sim.webhooks.log.entries if e.event == "issue_comment"
                    and json.loads(e.body)["comment"]["id"] == retry.id]
        h.sim.webhooks.redeliver(entry.id)
        again = await h.wait_for("the redelivered command's job", lambda: _job_ended(h, retry.id))
        assert (again.status, again.last_error) == ("done", None)
        await quiesce(h)

        row = await _row(h, retry.id)
        assert (row.verb, row.accepted, row.why) == ("retry", True, "done"), "the audit row was rewritten"
        assert await _attempt(h, key) == attempt, "the round was retried a second time"
        assert _replies_to(h, number, retry.id) == []
        assert sorted(_reactions(h, retry.id)) == ["+1", "eyes"]


async def test_a_command_whose_first_try_died_after_its_claim_is_acted_on_by_its_retry(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["noop"]),
                                poller={"interval_seconds": 3600}) as h:
        key, number = await open_and_enroll(h)
        await h.wait_status(key, "waiting_review")
        await quiesce(h)
        # The stop's first try claims the comment, then GitHub fails the permission read.
        fault = h.sim.faults.add(PERMISSION, status=502, count=1)
        stop = await h.sim.comment(REPO, number, "/converge stop", user="maint")
        await h.wait_status(key, "abandoned")
        assert fault.hits == 1
        row = await h.wait_for("the stop settled", lambda: _settled(h, stop.id))
        assert (row.verb, row.accepted) == ("stop", True)
        job = await _job(h, stop.id)
        assert job.attempts == 2 and job.status == "done"


async def test_a_command_deleted_between_its_tries_is_not_acted_on(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["noop"]),
                                poller={"interval_seconds": 3600}) as h:
        key, number = await open_and_enroll(h)
        await h.wait_status(key, "waiting_review")
        await quiesce(h)
        # The first try's permission read hangs, then fails; the maintainer deletes the comment
        # meanwhile. The retry reads the comment again (its first copy is the delivery's).
        fault = h.sim.faults.add(PERMISSION, status=502, delay=1.5, count=1)
        stop = await h.sim.comment(REPO, number, "/converge stop", user="maint")

        async def asked():
            return fault.hits == 1

        await h.wait_for("the first try's permission read", asked)
        await h.sim.delete_comment(REPO, stop.id, user="maint")
        job = await h.wait_for("the job's retry", lambda: _job_ended(h, stop.id))
        assert (job.status, job.attempts) == ("done", 2)
        await quiesce(h)
        view = await h.view(key)
        assert view.derived_status == "waiting_review", "a deleted comment stopped the run"
        assert (await runs.get_run(h.rt.db, view.pr.process_key)).state == "active"


# -- never the bot's own comments --------------------------------------------------------------

BOT_USER = "convergebot-user"  # a plain account the bot's token belongs to: its type is "User"
# A question the agent relays from the review: a line of it reads as a command.
RELAYED = "ask:The reviewer wrote:\n\n/converge stop\n\nShould I keep the old name?"


@asynccontextmanager
async def _bot_with_a_token(tmp_path, db_url, *, fixer) -> AsyncIterator[Harness]:
    """`bot_on_simulator`, but the bot's token is a plain user's (who may write to the repository)."""
    sim = Simulator(root=tmp_path / "github", token_user=BOT_USER)
    async with SimulatorServer(sim) as server:
        await sim.create_repo(REPO, files=FILES, collaborators={"maint": "write", BOT_USER: "write"})
        # Configured as someone might type it: GitHub's logins are one whatever their case.
        config = bot_config(db_url, server.url, github={"bot_login": BOT_USER.title()})
        async with serving(config, fixer=fixer) as (rt, http):
            sim.configure_webhooks(f"{http.base_url}/webhook", WEBHOOK_SECRET)
            await until("the poller's start-up tick", lambda: polled(rt), timeout=60)
            yield Harness(sim, server.url, rt, http)


async def test_the_bot_s_own_comment_is_no_command_when_it_writes_as_a_user(tmp_path, db_url):
    async with _bot_with_a_token(tmp_path, db_url, fixer=ScriptedFixer([RELAYED, "push"])) as h:
        h.sim.set_reviewer(REPO, steps(1, 0))
        key, number = await open_and_enroll(h)
        await h.wait_status(key, "escalated")

        async def escalation_posted():
            return [c for c in h.sim.state.issue_comments.values()
                    if c.user == BOT_USER and "convergebot escalation #" in c.body]

        (posted,) = await h.wait_for("the escalation's comment", escalation_posted)
        assert "\n/converge stop\n" in posted.body
        job = await h.wait_for("its command job", lambda: _job_ended(h, posted.id))
        assert (job.status, job.last_error) == ("done", None)
        await quiesce(h)
        assert await _row(h, posted.id) is None, "the bot's own comment was taken as a command"
        view = await h.view(key)
        assert view.derived_status == "escalated"
        assert (await runs.get_run(h.rt.db, view.pr.process_key)).state == "active"

        await h.sim.comment(REPO, number, "/converge answer Keep it.", user="maint")
        await h.wait_status(key, "merged", timeout=60)


async def test_an_app_s_command_like_comment_queues_no_command(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["noop"]),
                                poller={"interval_seconds": 3600}) as h:
        key, number = await open_and_enroll(h)
        await h.wait_status(key, "waiting_review")
        await quiesce(h)
        other = await h.sim.comment(REPO, number, "/converge stop", user="helper-app[bot]")
        await h.sim.settle()
        await quiesce(h)
        assert await _job(h, other.id) is None
        assert await _row(h, other.id) is None
        assert (await h.view(key)).derived_status == "waiting_review"


async def test_an_app_s_command_like_comment_is_not_recovered_on_an_escalated_pr(tmp_path, db_url):
    fixer = ScriptedFixer(["ask:Keep the old name?", "push"])
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer, poller={"interval_seconds": 0.25}) as h:
        h.sim.set_reviewer(REPO, steps(1, 0))
        key, number = await open_and_enroll(h)
        await h.wait_status(key, "escalated")
        other = await h.sim.comment(REPO, number, "/converge answer Rename it.", user="helper-app[bot]")
        # The escalated PR's steps read its comments since the escalation, several times over.
        ticks: list = []
        start = h.rt.health.last_poll_at

        async def polled_thrice():
            now = h.rt.health.last_poll_at
            if now != start and (not ticks or ticks[-1] != now):
                ticks.append(now)
            return len(ticks) >= 3

        await h.wait_for("three polls", polled_thrice)
        await quiesce(h)
        assert await _job(h, other.id) is None, "an App's comment was recovered as a command"
        assert (await h.view(key)).derived_status == "escalated"
        (esc,) = await h.escalations(key)
        assert esc.status == "open"


# -- an answer goes to the escalation it names, or to none ------------------------------------


async def test_a_quote_reply_answers_only_the_escalation_it_quotes(tmp_path, db_url):
    fixer = ScriptedFixer(["ask:Keep the old name?", "push", "ask:Split the module?", "push"])
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer, poller={"interval_seconds": 3600}) as h:
        h.sim.set_reviewer(REPO, steps(1, 1, 0))
        key, number = await open_and_enroll(h)
        await h.wait_status(key, "escalated")
        (first,) = await h.escalations(key)
        await h.sim.comment(REPO, number, "/converge answer Keep it.", user="maint")

        async def second_asked():
            found = await h.escalations(key)
            return found if len(found) == 2 and found[1].status == "open" else None

        _, second = await h.wait_for("the second question", second_asked, timeout=60)
        await quiesce(h)
        # A maintainer quote-replies the first escalation (answered already): the answer is for
        # that question, never for the one open now.
        quote = await h.sim.comment(REPO, number, f"> **convergebot escalation #{first.id}**: needs input\n\n"
                                    "Use the new name after all.", user="maint")
        row = await h.wait_for("the quote-reply settled", lambda: _settled(h, quote.id))
        assert (row.verb, row.accepted) == ("answer", False)
        assert "no open escalation" in row.why
        await quiesce(h)
        assert [(e.id, e.status) for e in await h.escalations(key)] == [(first.id, "answered"), (second.id, "open")]
        assert (await h.view(key)).derived_status == "escalated"
        (reply,) = _replies_to(h, number, quote.id)
        assert "no open escalation" in reply


async def test_refused_and_non_commands_get_no_acknowledgement_of_acting(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["noop"]),
                                poller={"interval_seconds": 3600}) as h:
        key, number = await open_and_enroll(h)
        await h.wait_status(key, "waiting_review")
        await quiesce(h)
        # An answer with nothing to answer is refused: seen, told why, never a +1.
        answer = await h.sim.comment(REPO, number, "/converge answer Keep it.", user="maint")
        row = await h.wait_for("the answer settled", lambda: _settled(h, answer.id))
        assert (row.accepted, row.why) == (False, "There is no open escalation to answer on this PR.")
        # A comment that only shows a command (in code) is no command: its job ends quietly.
        shown = await h.sim.comment(REPO, number, "Stop it with `/converge stop` if it loops.", user="maint")
        job = await h.wait_for("the shown command's job", lambda: _job_ended(h, shown.id))
        assert (job.status, job.last_error) == ("done", None)
        await quiesce(h)
        assert _reactions(h, answer.id) == ["eyes"]
        (reply,) = _replies_to(h, number, answer.id)
        assert "no open escalation" in reply
        assert await _row(h, shown.id) is None and _reactions(h, shown.id) == []
        assert _replies_to(h, number, shown.id) == []
        # Each audit row says what became of its own comment.
        assert [(c.verb, c.accepted, c.why) for c in await commands.for_pr(h.rt.db, key)] == [
            ("start", True, "done"), ("answer", False, "There is no open escalation to answer on this PR.")]
        assert (await h.view(key)).derived_status == "waiting_review"
