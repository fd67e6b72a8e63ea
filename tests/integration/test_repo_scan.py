"""The repository scan against the simulator: what a scan costs, where its cursors go, which
repositories it reads, and that only the leader scans. On both backends (cursors and jobs are
rows)."""

from __future__ import annotations

from datetime import timedelta

import httpx

from bot.config import Config
from bot.fixers import ScriptedFixer
from bot.github.client import GitHubClient, open_github
from bot.intake.scan import CURSOR_PREFIX, repositories, scan
from bot.runtime.context import Runtime
from bot.runtime.leadership import Leadership
from storage import cursors
from storage.models import Job

from ..e2e.harness import REPO, bot_on_simulator, quiesce
from ..helpers import app_private_key

SCAN = {"enabled": False, "repositories": [REPO]}  # run by the test, not the scheduler


async def _scan(h):
    h.sim.counters.reset()
    report = await scan(h.rt)
    return report, h.sim.counters.snapshot()


async def _settle(h):
    """Scans until one finds the repository unchanged: a first scan reads everything, and the
    one after a cursor moved asks a new URL once."""
    for _ in range(4):
        report, _ = await _scan(h)
        if report.unchanged == report.repositories:
            return
        await quiesce(h)
    raise AssertionError(f"never unchanged: {report}")


async def _jobs(h, kind: str) -> list[Job]:
    from sqlmodel import select

    async with h.rt.db.session() as s:
        return list(await s.exec(select(Job).where(Job.kind == kind).order_by(Job.id)))


async def test_an_unchanged_repository_costs_no_rate_limit(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["noop"]), scan=SCAN) as h:
        h.sim.webhook_faults(drop_all=True)  # what the scan finds, no webhook brought
        pr = await h.sim.open_pr(REPO, title="t", head="side", author="dev", files={"app/x.py": "x = 1\n"})
        await h.sim.comment(REPO, pr.number, "Looks fine to me.", user="maint")
        await _settle(h)
        remaining = h.rt.rate_budget.bucket("core").remaining

        report, counts = await _scan(h)
        # Three conditional reads (open PRs, PR comments, review comments), each a 304.
        assert (report.repositories, report.unchanged, report.enrolls, report.commands) == (1, 1, 0, 0)
        assert counts["total"] == 3 and h.sim.counters.get(status=304) == 3, counts
        assert h.rt.rate_budget.bucket("core").remaining == remaining

        # A new comment changes one listing: one rate-limited read, and its command is queued.
        c = await h.sim.comment(REPO, pr.number, "/converge", user="maint")
        report, counts = await _scan(h)
        assert (report.unchanged, report.commands) == (0, 1)
        assert h.sim.counters.get(status=200) == 1, counts
        assert [j.key for j in await _jobs(h, "command")] == [f"cmd:{c.id}"]
        await h.wait_status(f"{REPO}#{pr.number}", "waiting_review")


async def test_the_cursor_stays_put_until_something_newer_shows_then_moves_to_it(tmp_path, sqlite_db_url):
    async with bot_on_simulator(tmp_path, sqlite_db_url, scan=SCAN) as h:
        pr = await h.sim.open_pr(REPO, title="t", head="side", author="dev", files={"app/x.py": "x = 1\n"})
        await scan(h.rt)
        first = await cursors.load(h.rt.db, CURSOR_PREFIX)
        name = f"{CURSOR_PREFIX}{REPO}:issue"
        # Nothing yet: the first look goes back `lookback_hours` and keeps that place.
        assert set(first) == {name, f"{CURSOR_PREFIX}{REPO}:review"}
        await scan(h.rt)
        assert await cursors.load(h.rt.db, CURSOR_PREFIX) == first
        c = await h.sim.comment(REPO, pr.number, "hello", user="dev")
        await scan(h.rt)
        moved = await cursors.load(h.rt.db, CURSOR_PREFIX)
        assert moved[name] == c.updated_at.strftime("%Y-%m-%dT%H:%M:%SZ")
        assert moved[f"{CURSOR_PREFIX}{REPO}:review"] == first[f"{CURSOR_PREFIX}{REPO}:review"]


async def test_the_first_scan_looks_back_only_the_lookback_window(tmp_path, sqlite_db_url):
    async with bot_on_simulator(tmp_path, sqlite_db_url, scan=SCAN | {"lookback_hours": 1}) as h:
        h.sim.webhook_faults(drop_all=True)
        old_pr = await h.sim.open_pr(REPO, title="old", head="old", author="dev", files={"a.txt": "1\n"})
        new_pr = await h.sim.open_pr(REPO, title="new", head="new", author="dev", files={"b.txt": "1\n"})
        old = await h.sim.comment(REPO, old_pr.number, "/converge", user="maint")
        stale = h.sim.state.issue_comments[old.id]
        stale.created_at = stale.updated_at = stale.created_at - timedelta(hours=2)
        new = await h.sim.comment(REPO, new_pr.number, "/converge", user="maint")
        report = await scan(h.rt)
        assert report.commands == 1
        assert [j.key for j in await _jobs(h, "command")] == [f"cmd:{new.id}"]


async def test_edited_comments_and_the_bots_own_are_never_commands(tmp_path, sqlite_db_url):
    async with bot_on_simulator(tmp_path, sqlite_db_url, scan=SCAN) as h:
        h.sim.webhook_faults(drop_all=True)
        pr = await h.sim.open_pr(REPO, title="t", head="side", author="dev", files={"a.txt": "1\n"})
        edited = await h.sim.comment(REPO, pr.number, "thinking about it", user="maint")
        await h.sim.comment(REPO, pr.number, "/converge", user="convergebot[bot]")
        await h.wait_for("the next second", _a_second_after(edited.created_at))
        await h.sim.edit_comment(REPO, edited.id, "/converge", user="maint")
        report = await scan(h.rt)
        assert report.commands == 0 and await _jobs(h, "command") == []


def _a_second_after(at):
    from storage.models import utcnow

    async def later() -> bool:
        return utcnow().replace(microsecond=0) > at

    return later


async def test_a_replica_that_does_not_lead_reads_nothing(tmp_path, sqlite_db_url):
    class Follower(Leadership):
        async def holds(self) -> bool:  # another replica holds the leadership
            return False

    async with bot_on_simulator(tmp_path, sqlite_db_url, scan=SCAN) as h:
        h.sim.webhook_faults(drop_all=True)
        pr = await h.sim.open_pr(REPO, title="t", head="side", author="dev", files={"a.txt": "1\n"})
        await h.sim.comment(REPO, pr.number, "/converge", user="maint")
        h.rt.leadership = Follower(h.rt.db)
        report, counts = await _scan(h)
        assert not report.led and counts["total"] == 0
        assert await _jobs(h, "command") == [] and await cursors.load(h.rt.db, CURSOR_PREFIX) == {}


async def test_a_scan_waits_while_the_rate_limit_is_down_to_the_reserve(tmp_path, sqlite_db_url):
    import time

    async with bot_on_simulator(tmp_path, sqlite_db_url, scan=SCAN) as h:
        h.sim.webhook_faults(drop_all=True)
        pr = await h.sim.open_pr(REPO, title="t", head="side", author="dev", files={"a.txt": "1\n"})
        await h.sim.comment(REPO, pr.number, "/converge", user="maint")
        h.rt.rate_budget.observe("core", 5000, 900, time.time() + 1800)  # the reserve is 1000
        report, counts = await _scan(h)
        assert report.deferred and counts["total"] == 0 and await _jobs(h, "command") == []
        h.rt.rate_budget.observe("core", 5000, 4000, time.time() + 3600)  # a new window
        assert (await scan(h.rt)).commands == 1


async def test_a_github_app_scans_its_installation_repositories(tmp_path, simulator, sim, db):
    for name in ("acme/one", "acme/two"):
        await sim.create_repo(name)
    pem_path = app_private_key(tmp_path)
    config = Config.model_validate({
        "database": {"url": db.url},
        "github": {"api_url": simulator.url, "app_id": "9301", "private_key_path": str(pem_path),
                   "installation_id": 9302},
        "scan": {"repositories": ["Acme/One", "other/three"]},
    })
    async with open_github(api_url=simulator.url, app_id="9301", private_key=pem_path.read_text(),
                           installation_id=9302) as gh:
        rt = Runtime(config, db, GitHubClient(gh))
        # Configured ones first, each repository once whatever its spelling; a known PR's
        # repository outside the installation is not read (the App cannot see it).
        assert await repositories(rt, ["gone/away"]) == ["Acme/One", "other/three", "acme/two"]
        sim.counters.reset()
        await repositories(rt, [])
        assert sim.counters.get("GET", "/installation/repositories", 304) == 1


async def test_the_simulator_lists_a_repositorys_comments_since_a_time(simulator, sim):
    await sim.create_repo(REPO)
    pr = await sim.open_pr(REPO, title="t", head="side", author="dev", files={"a.txt": "1\n"})
    first = await sim.comment(REPO, pr.number, "one", user="dev")
    second = await sim.comment(REPO, pr.number, "two", user="dev")
    sim.state.issue_comments[first.id].updated_at -= timedelta(hours=1)
    async with httpx.AsyncClient(base_url=simulator.url, headers={"Authorization": "token t"}) as c:
        since = (second.updated_at - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        r = await c.get(f"repos/{REPO}/issues/comments", params={"since": since, "sort": "updated",
                                                                 "direction": "asc"})
        assert [x["id"] for x in r.json()] == [second.id]
        assert r.json()[0]["html_url"].endswith(f"/{REPO}/pull/{pr.number}#issuecomment-{second.id}")
        r = await c.get(f"repos/{REPO}/issues/comments", params={"sort": "updated", "direction": "desc"})
        assert [x["id"] for x in r.json()] == [second.id, first.id]
        etag = r.headers["ETag"]
        again = await c.get(f"repos/{REPO}/issues/comments", params={"sort": "updated", "direction": "desc"},
                            headers={"If-None-Match": etag})
        assert again.status_code == 304
        assert (await c.get(f"repos/{REPO}/issues/comments", params={"since": "yesterday"})).status_code == 422
        assert (await c.get(f"repos/{REPO}/pulls/comments", params={"since": since})).json() == []
