"""Enrollment intent whose webhook never arrives: the repository scan finds it, and a comment
that both a webhook and the scan bring runs once."""

from __future__ import annotations

from sqlmodel import select

from bot.fixers import ScriptedFixer
from bot.intake.scan import scan
from simulator import signature
from storage import commands, runs
from storage.models import Job

from ..serving import WEBHOOK_SECRET
from .harness import REPO, bot_on_simulator, quiesce

AGENT = "coding-agent"
SCAN = {"enabled": False, "repositories": [REPO]}  # run by the test, not the scheduler


async def _jobs(h, kind: str) -> list[Job]:
    async with h.rt.db.session() as s:
        return list(await s.exec(select(Job).where(Job.kind == kind).order_by(Job.id)))


async def _verbs(h, key: str) -> list[tuple[int, str, bool]]:
    return [(c.comment_id, c.verb, c.accepted) for c in await commands.for_pr(h.rt.db, key)]


async def _open(h, head: str, **kw) -> tuple[str, int]:
    pr = await h.sim.open_pr(REPO, title=f"Change {head}", head=head, files={f"app/{head}.py": "x = 1\n"}, **kw)
    return f"{REPO}#{pr.number}", pr.number


def _acks(h, comment_id: int) -> list[dict]:
    return [e for e in h.sim.effects("reaction") if e["comment_id"] == comment_id and e["content"] == "+1"]


async def test_intent_whose_webhooks_are_all_lost_takes_effect_once_through_the_scan(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["noop"]), scan=SCAN,
                                convergence={"auto_enroll_authors": [AGENT]}) as h:
        h.sim.webhook_faults(drop_all=True)
        commented, commented_no = await _open(h, "commented", author="dev")
        labelled, labelled_no = await _open(h, "labelled", author="dev", labels=["converge"])
        by_agent, _ = await _open(h, "agent", author=AGENT)
        plain, plain_no = await _open(h, "plain", author="dev")
        start = await h.sim.comment(REPO, commented_no, "/converge", user="maint")
        await h.sim.comment(REPO, plain_no, "Not yet, /converge later maybe.", user="dev")

        report = await scan(h.rt)
        assert (report.enrolls, report.commands) == (2, 2)
        for key in (commented, labelled, by_agent):
            await h.wait_status(key, "waiting_review")
        await quiesce(h)
        assert await h.view(plain) is None  # a mention that parses as no command enrolls nothing

        # `/converge stop` on an enrolled PR whose label stays on: stopped, and not re-enrolled.
        stop = await h.sim.comment(REPO, labelled_no, "/converge stop", user="maint")
        report = await scan(h.rt)
        assert (report.enrolls, report.commands) == (0, 1)
        await h.wait_status(labelled, "abandoned")
        # The PR changes while its label stays on: it stays stopped (the bot has its row).
        await h.sim.push(REPO, "labelled", {"app/labelled.py": "x = 2\n"})
        await quiesce(h)

        jobs_before = [(j.kind, j.key) for j in await _jobs(h, "enroll") + await _jobs(h, "command")]
        for _ in range(2):  # the bot's own comments and reactions since are no commands
            report = await scan(h.rt)
            assert (report.enrolls, report.commands) == (0, 0), report
        await quiesce(h)
        assert [(j.kind, j.key) for j in await _jobs(h, "enroll") + await _jobs(h, "command")] == jobs_before

        assert (await h.view(labelled)).derived_status == "abandoned"
        for key in (commented, by_agent):
            assert (await h.view(key)).derived_status == "waiting_review"
        for key in (commented, labelled, by_agent):
            assert len(await runs.runs_for(h.rt.db, key)) == 1, key
        assert await _verbs(h, commented) == [(start.id, "start", True)]
        assert await _verbs(h, labelled) == [(stop.id, "stop", True)]
        assert len(_acks(h, start.id)) == 1 and len(_acks(h, stop.id)) == 1
        assert [j.key for j in await _jobs(h, "command")].count(f"cmd:{start.id}") == 1
        assert h.sim.deliveries and all(d.dropped for d in h.sim.deliveries)


async def test_the_scheduled_scan_finds_a_lost_comment(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["noop"]),
                                scan={"repositories": [REPO], "interval_seconds": 0.3}) as h:
        h.sim.webhook_faults(drop_all=True)
        key, number = await _open(h, "feat", author="dev")
        start = await h.sim.comment(REPO, number, "/converge", user="maint")
        await h.wait_status(key, "waiting_review")
        assert await _verbs(h, key) == [(start.id, "start", True)]


async def test_a_comment_the_webhook_brought_first_is_not_run_again_by_the_scan(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["noop"]), scan=SCAN) as h:
        key, number = await _open(h, "feat", author="dev")
        start = await h.sim.comment(REPO, number, "/converge", user="maint")
        await h.wait_status(key, "waiting_review")
        await quiesce(h)
        report = await scan(h.rt)
        assert report.commands == 0
        await quiesce(h)
        assert await _verbs(h, key) == [(start.id, "start", True)]
        assert [j.key for j in await _jobs(h, "command")] == [f"cmd:{start.id}"]
        assert len(_acks(h, start.id)) == 1


async def test_a_comment_the_scan_found_first_is_not_run_again_by_its_late_webhook(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["noop"]), scan=SCAN) as h:
        key, number = await _open(h, "feat", author="dev")
        await quiesce(h)
        h.sim.webhook_faults(drop_all=True)
        start = await h.sim.comment(REPO, number, "/converge", user="maint")
        assert (await scan(h.rt)).commands == 1
        await h.wait_status(key, "waiting_review")
        await quiesce(h)
        # The lost delivery arrives after all (as a redelivery would bring it): same job key.
        [lost] = [d for d in h.sim.deliveries if d.event == "issue_comment" and d.payload["comment"]["id"] == start.id]
        assert lost.dropped
        r = await h.http.post("/webhook", content=lost.body, headers={
            "Content-Type": "application/json", "X-GitHub-Event": lost.event, "X-GitHub-Delivery": lost.id,
            "X-Hub-Signature-256": signature(WEBHOOK_SECRET, lost.body)})
        assert r.status_code == 202, r.text
        await quiesce(h)
        assert [j.key for j in await _jobs(h, "command")] == [f"cmd:{start.id}"]
        assert await _verbs(h, key) == [(start.id, "start", True)]
        assert len(_acks(h, start.id)) == 1 and len(await runs.runs_for(h.rt.db, key)) == 1
