"""The dashboard on the real server: the list's filters, a PR's page (timeline, escalation
links, effects, budget), stored Markdown made inert, the dry-run banner, bad keys."""

from __future__ import annotations

import json
import re

from sqlalchemy import update

from bot.engine import outbox
from bot.surfaces.web.dashboard import would_text
from storage import commands, escalations, jobs, prs, rounds
from storage.database import Database
from storage.models import Job

from ..helpers import enroll
from ..serving import make_config, serving

KEY = "octo/repo#9"
OTHER = "acme/lib#2"
HOSTILE = ("Use `mean()` <script>alert(1)</script> [click](javascript:alert(2)) "
           "<img src=x onerror=alert(3)> ![pixel](https://tracker.example/p.png) [docs](https://example.com/docs)")
ESCALATION_COMMENT, ANSWER_COMMENT = 5551, 7771
LATER = 3600  # seconds: the seeded jobs stay queued, out of the workers' reach, while a test reads them


async def seed(db: Database) -> dict:
    """One PR with a finished round (findings, fixer verdict, a rerun, replies), a round in
    progress, an answered escalation (its comment and the answer's recorded) and an open one,
    a sync job, effects (one in a dry-run state); and a second PR in another repository."""
    pk = await enroll(db, KEY, title="Handle <b>empty</b> input", url="https://github.com/octo/repo/pull/9")
    await enroll(db, OTHER, title="Other", url="https://github.com/acme/lib/pull/2")
    finding = {"thread_id": "T1", "comment_id": 1, "path": "w/stats.py", "line": 3, "body": HOSTILE,
               "author": "copilot", "fingerprint": "f1"}
    async with db.session() as s:
        await rounds.start(s, KEY, pk, 1, "a" * 40)
        await rounds.update_round(s, KEY, pk, 1, {
            "review_id": 11, "findings": json.dumps([finding]), "status": "fixed", "verdict": "fixed",
            "exit_head": "b" * 40, "summary": "Fixed **it**. " + HOSTILE, "fixer": "fake", "attempt": 1})
        await rounds.start(s, KEY, pk, 2, "b" * 40)
        answered = await escalations.create(s, KEY, pk, 1, "question", HOSTILE, "fp1")
        await outbox.add(s, "reply", f"{pk}:r1", pr_key=KEY, process_key=pk, delay_seconds=LATER, round=1,
                         replies=[{"thread_id": "T1", "text": "done", "resolve": True, "answered": False}])
        await outbox.comment(s, KEY, "esc-1", "body", process_key=pk, escalation_id=answered.id)
        await outbox.add(s, "request_review", f"{pk}:dry", pr_key=KEY, process_key=pk, delay_seconds=LATER)
    await escalations.set_comment(db, answered.id, ESCALATION_COMMENT)
    assert await commands.claim(db, ANSWER_COMMENT, KEY, "alice", "answer", "/converge answer Return 0.0")
    async with db.session() as s:
        await commands.settle(s, ANSWER_COMMENT, True, "done")
        assert await escalations.answer(s, answered.id, "Return `0.0`. " + HOSTILE, "alice")
        still_open = await escalations.create(s, KEY, pk, 2, "husk", "Retry?", "fp2")
        # A state for an effect recorded but not performed (what a dry run leaves).
        await s.exec(update(Job).where(Job.key == f"fx:request_review:{pk}:dry").values(
            status="dry_run", last_error="dry run: would have requested a review of bbbbbbb from copilot"))
        await s.exec(update(Job).where(Job.key == "fx:comment:esc-1").values(status="parked"))
    await jobs.enqueue(db, "sync", f"sync:{KEY}:seed", pr_key=KEY, delay_seconds=LATER)
    assert await prs.fenced_update(db, KEY, pk, {"status": "escalated", "current_round": 2,
                                                 "last_action": "escalated: husk", "head_sha": "b" * 40})
    return {"process_key": pk, "answered": answered.id, "open": still_open.id}


def _inert(html: str) -> None:
    """No stored text became markup: no script, no javascript: link, no image."""
    assert "<script>alert" not in html
    assert not re.search(r"""href\s*=\s*["']?\s*javascript:""", html, re.I)
    assert "<img" not in html and not re.search(r"<[^>]*\bonerror\s*=", html, re.I)


async def test_list_filters_by_status_repo_and_attention(db_url):
    async with serving(make_config(db_url)) as (rt, http):
        await seed(rt.db)
        page = (await http.get("/")).text
        assert KEY in page and OTHER in page
        assert '<meta name="viewport"' in page and 'http-equiv="refresh" content="15"' in page
        assert 'href="/prs/octo/repo/9"' in page and 'href="https://github.com/octo/repo/pull/9"' in page
        assert re.search(r'<time datetime="[0-9T:.+-]+">\d{4}-\d\d-\d\d \d\d:\d\d UTC</time>', page)
        assert "2/8" in page and "escalated: husk" in page
        # Fixer runs and reruns over the run's rounds: round 1 ran twice, round 2 not yet.
        assert re.search(r'<tr data-pr="octo/repo#9">.*?<td [^>]*class="attempts">2 / 1</td>', page, re.S)

        only = (await http.get("/", params={"status": "escalated"})).text
        assert KEY in only and OTHER not in only and '<option value="escalated" selected>' in only
        repo = (await http.get("/", params={"repo": "acme/lib"})).text
        assert OTHER in repo and KEY not in repo
        attention = (await http.get("/", params={"attention": "1"})).text
        assert KEY in attention and OTHER not in attention
        none = (await http.get("/", params={"status": "merged"})).text
        assert "No PR matches these filters." in none and KEY not in none.split("</form>")[1]


async def test_pr_page_shows_timeline_escalation_links_effects_and_budget(db_url):
    async with serving(make_config(db_url)) as (rt, http):
        ids = await seed(rt.db)
        r = await http.get("/prs/octo/repo/9")
        assert r.status_code == 200
        html = r.text
        assert "Handle &lt;b&gt;empty&lt;/b&gt; input" in html
        # The finished round: entry → exit head, its findings, verdict, the rerun, its reply.
        assert "<code>aaaaaaa</code> →\n  <code>bbbbbbb</code>" in html
        assert "review 11 · 1 finding(s)" in html and "verdict <strong>fixed</strong>" in html
        assert "attempts 2 / reruns 1 · replies 1" in html
        # The round in progress says so (not an empty exit head).
        assert "<code>bbbbbbb</code> →\n  in progress" in html and "<code></code>" not in html
        assert f'href="https://github.com/octo/repo/pull/9#issuecomment-{ESCALATION_COMMENT}"' in html
        assert f'href="https://github.com/octo/repo/pull/9#issuecomment-{ANSWER_COMMENT}"' in html
        assert f'id="escalation-{ids["open"]}"' in html and "answered by alice" in html
        # Markdown renders, safely.
        assert "<code>mean()</code>" in html and "<strong>it</strong>" in html
        assert '<a href="https://example.com/docs">docs</a>' in html
        _inert(html)
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
        # Effects with their states, the budget; no dry-run banner outside a dry run.
        assert "dry run: nothing is written to GitHub" not in html
        assert re.search(r"<td data-label=\"effect\">reply</td>\s*<td data-label=\"state\">queued</td>", html)
        assert 'would have requested a review of bbbbbbb from copilot</span> <span class="muted">(dry_run)' in html
        # A state the page does not know is shown as stored.
        assert re.search(r'<td data-label="effect">comment</td>\s*<td data-label="state">parked</td>', html)
        assert "0 of 400 writes" in html and "0 of 60 comments" in html
        assert re.search(r'<td data-label="kind">sync</td>', html)


async def test_an_abandoned_pr_shows_why_and_a_stuck_one_needs_attention(db_url):
    from bot.engine.submit import abandon_pr
    from storage import runs

    async with serving(make_config(db_url)) as (rt, http):
        await enroll(rt.db, KEY)
        assert await abandon_pr(rt.db, KEY, "superseded by **#12**")
        stuck = await enroll(rt.db, OTHER)
        # The run ends out of band (a crash clean-up): the row still says converging.
        assert await runs.terminate_run(rt.db, stuck, "clean-up after a crash")
        page = (await http.get("/prs/octo/repo/9")).text
        assert re.search(r'id="abandon-reason"><p>superseded by <strong>#12</strong></p>', page)
        detail = (await http.get("/api/prs/octo/repo/9")).json()
        assert (detail["status"], detail["abandon_reason"]) == ("abandoned", "superseded by **#12**")
        attention = (await http.get("/", params={"attention": "1"})).text
        assert OTHER in attention and KEY not in attention


async def test_dry_run_banner_on_every_page(db_url):
    async with serving(make_config(db_url)) as (rt, http):
        await seed(rt.db)
        assert "dry run" not in (await http.get("/")).text
    async with serving(make_config(db_url, github={"dry_run": True})) as (rt, http):
        for path in ("/", "/prs/octo/repo/9", "/prs/octo/repo/404", "/prs/a/b/x"):
            assert "dry run: nothing is written to GitHub" in (await http.get(path)).text, path


async def test_pr_page_refuses_a_malformed_key_and_an_unknown_pr(db_url):
    async with serving(make_config(db_url)) as (rt, http):
        missing = await http.get("/prs/octo/repo/404")
        assert missing.status_code == 404 and "octo/repo#404 is not enrolled." in missing.text
        for path in ("/prs/a/b/x", "/prs/bad!owner/repo/1", "/prs/octo/repo/0"):
            r = await http.get(path)
            assert r.status_code == 400 and r.headers["content-type"].startswith("text/html"), path
            assert "malformed" in r.text, path
        assert await prs.list_all(rt.db) == []


def test_a_dry_run_job_without_a_summary_says_its_effect():
    assert would_text({"kind": "effect", "effect": "update_branch", "last_error": None}) == \
        "would have update branch"
    assert would_text({"kind": "fix", "last_error": "dry run: would run the fake fixer"}) == "would run the fake fixer"
