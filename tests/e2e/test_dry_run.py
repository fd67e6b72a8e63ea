"""Dry run: the real bot reads and decides on the simulator, and writes nothing to GitHub."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

import httpx
import pytest
from sqlmodel import select

from bot import metrics
from bot.engine import outbox
from bot.engine.outbox import DRY_RUN
from bot.engine.read import findings_of
from simulator import Simulator, SimulatorServer, ThreadSpec
from storage import jobs, prs
from storage.database import Database
from storage.models import Job

from ..chaos.bot_process import free_port, to_toml
from ..helpers import until
from ..serving import WEBHOOK_SECRET
from .harness import COPILOT, REPO, bot_on_simulator, quiesce

READS = ("GET", "HEAD")


def github_writes(sim) -> list:
    """Every request that could have changed GitHub: any method but GET/HEAD (a POST /graphql
    may be a query: its mutations are the simulator's side effects), and every side effect the
    bot's identity made."""
    sent = [(m, r, s) for (m, r, s) in sim.counters._counts if m not in READS and r != "/graphql"]
    return sent + [e for e in sim.effects() if e.get("actor") == sim.token_user]


async def _effects(h, key: str) -> list[Job]:
    async with h.rt.db.session() as s:
        return list((await s.exec(select(Job).where(Job.pr_key == key, Job.kind.in_(("effect", "fix")))
                                  .order_by(Job.id))).all())


def _kinds(jobs: list[Job], status: str) -> set[str]:
    return {json.loads(j.payload).get("effect", j.kind) for j in jobs if j.status == status}


async def _two_prs(h, dry_run: bool) -> tuple[str, str]:
    """A PR whose review will have findings (a fix round) and one whose review is clean (a
    merge), both enrolled by a maintainer. In a dry run no review request reaches the reviewer:
    once the bot decided to ask, Copilot reviews by itself, as an automatic review would."""
    fix = await h.sim.open_pr(REPO, title="Needs work", head="work", author="dev",
                              files={"app/core.py": "def f():\n    return 2\n"})
    clean = await h.sim.open_pr(REPO, title="Ready", head="ready", author="dev",
                                files={"app/util.py": "X = 2\n"})
    await h.sim.settle()
    # What the test itself did on the simulator is not the bot's: count from here.
    h.sim.counters.reset()
    h.sim.side_effects.clear()
    keys = f"{REPO}#{fix.number}", f"{REPO}#{clean.number}"
    for pr in (fix, clean):
        await h.sim.comment(REPO, pr.number, "/converge", user="maint")

    async def asked():
        jobs = [j for k in keys for j in await _effects(h, k)]
        done = [j for j in jobs if json.loads(j.payload)["effect"] == "request_review"
                and j.status == (DRY_RUN if dry_run else "done")]
        return len({j.pr_key for j in done}) == 2

    await h.wait_for("both review requests decided", asked, timeout=30)
    threads = [ThreadSpec(path="app/core.py", line=1, body="finding one"),
               ThreadSpec(path="app/core.py", line=2, body="finding two")]
    await h.sim.submit_review(REPO, fix.number, user=COPILOT, body="Copilot reviewed and generated 2 comments.",
                              threads=threads)
    await h.sim.submit_review(REPO, clean.number, user=COPILOT, body="Copilot reviewed and generated no comments.")
    return keys


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry_run", "for_real"])
async def test_a_dry_run_reads_and_decides_everything_and_writes_nothing(tmp_path, db_url, dry_run):
    suppressed = {k: metrics.DRY_RUN_SUPPRESSED.labels(k)._value.get() for k in ("merge", "fix", "react")}
    async with bot_on_simulator(tmp_path, db_url, github={"dry_run": dry_run}) as h:
        fix_key, merge_key = await _two_prs(h, dry_run)
        if not dry_run:
            # The same set-up without the dry run writes: the acknowledgement, review requests,
            # check runs and the merge reach GitHub (so the 0 below measures something).
            await h.wait_status(merge_key, "merged", timeout=60)
            wanted = {"reaction", "copilot_review_requested", "check_run_created", "merge"}

            async def written():  # a check run settles a moment before it is written
                return wanted <= {e["kind"] for e in github_writes(h.sim) if isinstance(e, dict)}

            await h.wait_for(f"writes of kinds {sorted(wanted)}", written, timeout=30)
            return

        # Decided: the clean PR would be merged, the other's round would go to the fixer.
        await h.wait_status(merge_key, "merging", timeout=60)

        async def fix_decided():
            jobs = await _effects(h, fix_key)
            return jobs if "fix" in _kinds(jobs, DRY_RUN) else None

        await h.wait_for("the fix round's dry-run record", fix_decided, timeout=60)

        async def effects_settled():
            # Each decided effect is claimed and recorded as dry_run: none waits or retries.
            jobs = await _effects(h, merge_key) + await _effects(h, fix_key)
            return jobs if jobs and all(j.status == DRY_RUN for j in jobs) else None

        jobs = await h.wait_for("every effect recorded as a dry run", effects_settled, timeout=30)

        # Nothing was written to GitHub: no request but reads, no mutation, no side effect.
        assert github_writes(h.sim) == []
        assert h.sim.counters.get(method="GET") > 0  # it did read

        merge_jobs, fix_jobs = await _effects(h, merge_key), await _effects(h, fix_key)
        assert {"react", "check_run", "merge"} <= _kinds(merge_jobs, DRY_RUN)
        assert {"react", "fix"} <= _kinds(fix_jobs, DRY_RUN)
        (merge,) = [j for j in merge_jobs if json.loads(j.payload).get("effect") == "merge"]
        assert merge.last_error.startswith("dry run: would have merged at ")
        assert all(j.attempts == 1 and j.last_error.startswith("dry run: would") for j in jobs)

        # The PR pages and the API show the decisions.
        merging = await h.view(merge_key)
        assert merging.pr.status == "merging" and merging.pr.outcome is None
        fixing = await h.view(fix_key)
        assert fixing.pr.last_action.startswith("dry run: would run the fake fixer on round 1")
        assert "2 finding(s)" in fixing.pr.last_action
        (rnd,) = await h.rounds(fix_key)
        assert len(json.loads(rnd.findings)) == 2 and rnd.summary.startswith("dry run: the fixer did not run")
        assert rnd.fixer_finished_at is None and rnd.status is None
        # The round's deadline check is held, so it does not call the round a husk.
        async with h.rt.db.session() as s:
            (check,) = (await s.exec(select(Job).where(Job.pr_key == fix_key, Job.kind == "progress_check"))).all()
        assert check.status == "queued" and check.last_error.startswith("dry run: held")

        headers = {"Authorization": "Bearer api-token"}
        api = (await h.http.get("/api/prs", headers=headers)).json()
        shown = {row["pr_key"]: row for row in (api if isinstance(api, list) else api.get("prs", []))}
        assert (shown[merge_key]["status"], shown[fix_key]["status"]) == ("merging", "converging")
        page = await h.http.get("/", headers=headers)
        assert page.status_code == 200 and "dry run: would run the fake fixer" in page.text
        # The PR's detail lists its effects in the dry-run state, each with what it would have done.
        owner_repo, number = merge_key.split("#")
        detail = (await h.http.get(f"/api/prs/{owner_repo}/{number}", headers=headers)).json()
        effects = {e["effect"]: e for e in detail["effects"]}
        assert effects["merge"]["status"] == DRY_RUN and effects["merge"]["dry_run"] is True
        assert effects["merge"]["last_error"].startswith("dry run: would have merged at ")
        pr_page = await h.http.get(f"/prs/{owner_repo}/{number}", headers=headers)
        assert pr_page.status_code == 200 and "would have merged at" in pr_page.text

        # Counted by kind.
        for kind in ("merge", "fix", "react"):
            assert metrics.DRY_RUN_SUPPRESSED.labels(kind)._value.get() > suppressed[kind]

        # A round's thread replies (the fixer's or the step's declines; here queued as they
        # would be) are recorded too, and nothing waits on them any more.
        async with h.rt.db.session() as s:
            assert await outbox.replies(s, fix_key, fixing.pr.process_key,
                                        [(f, "Declined: out of scope.", True) for f in findings_of(rnd.findings)],
                                        key="declines", round_no=1)
        h.rt.wake_workers()

        async def replies_recorded():
            return [j for j in await _effects(h, fix_key) if _kinds([j], DRY_RUN) == {"reply"}]

        (reply,) = await h.wait_for("the replies' dry-run record", replies_recorded, timeout=15)
        assert reply.last_error == "dry run: would have replied on 2 review thread(s), resolving 2"
        assert await outbox.next_due(h.rt.db, fix_key, "reply") is None

        # Settled: two polls (each re-steps both PRs) later, no new effect was decided, none
        # is waiting or retrying, and still nothing was written. Counted from once nothing due is
        # left (one CI run counted an effect queued just after the replies' record as new).
        await quiesce(h)
        before = {j.id for j in await _effects(h, merge_key) + await _effects(h, fix_key)}
        for _ in range(2):
            seen = h.rt.health.last_poll_at

            async def polled(seen=seen):
                return h.rt.health.last_poll_at != seen

            await h.wait_for("a poll", polled, timeout=15)
        await quiesce(h)
        after = await _effects(h, merge_key) + await _effects(h, fix_key)
        assert {j.id for j in after} == before, [(j.id, j.key, j.status, j.last_error) for j in after if j.id not in before]
        assert all(j.status == DRY_RUN for j in after)
        assert github_writes(h.sim) == []


async def test_the_serve_dry_run_process_decides_a_merge_and_writes_nothing(tmp_path, db_url):
    """The real `convergebot serve --dry-run` as a child process, the simulator in this one."""
    sim = Simulator(root=tmp_path / "github")
    async with SimulatorServer(sim) as server:
        await sim.create_repo(REPO, files={"README.md": "# app\n"}, collaborators={"maint": "write"})
        port = free_port()
        config = tmp_path / "convergebot.toml"
        config.write_text(to_toml({
            "database": {"url": db_url},
            "github": {"api_url": server.url, "token": "t", "webhook_secret": WEBHOOK_SECRET},
            "server": {"port": port, "shutdown_grace_seconds": 2},
            "poller": {"interval_seconds": 2, "jitter_seconds": 0},
            "jobs": {"idle_poll_seconds": 0.05},
            "fixer": {"kind": "author"},
        }))
        env = {k: v for k, v in os.environ.items() if not k.startswith("CONVERGEBOT_")}
        argv = [sys.executable, "-m", "bot", "--config", str(config)]
        migrated = await asyncio.create_subprocess_exec(*argv, "migrate", env=env)
        assert await asyncio.wait_for(migrated.wait(), 60) == 0
        proc = await asyncio.create_subprocess_exec(*argv, "serve", "--dry-run", env=env,
                                                    stdout=asyncio.subprocess.DEVNULL,
                                                    stderr=asyncio.subprocess.PIPE)
        logged: list[dict] = []

        async def read_log() -> None:
            async for line in proc.stderr:
                try:
                    logged.append(json.loads(line))
                except json.JSONDecodeError:
                    pass

        reader = asyncio.create_task(read_log())
        db = Database(db_url)
        try:
            async def listening():
                return any(e.get("event") == "server.listening" for e in logged) or proc.returncode is not None

            await until("serve to listen", listening, 30)
            assert proc.returncode is None, logged[-5:]
            assert any(e.get("event") == "server.dry_run" for e in logged)
            assert any(e.get("event") == "redelivery.off" and "dry run" in e.get("reason", "") for e in logged)
            sim.configure_webhooks(f"http://127.0.0.1:{port}/webhook", WEBHOOK_SECRET)

            pr = await sim.open_pr(REPO, title="Ready", head="ready", author="dev", files={"README.md": "# app!\n"})
            work = await sim.open_pr(REPO, title="Work", head="work", author="dev", files={"a.txt": "a\n"})
            await sim.settle()
            sim.counters.reset()
            sim.side_effects.clear()
            key, work_key = f"{REPO}#{pr.number}", f"{REPO}#{work.number}"
            for n in (pr.number, work.number):
                await sim.comment(REPO, n, "/converge", user="maint")

            async def effect(kind: str, pr_key: str = key):
                return [j for j in await jobs.list_jobs(db, pr_key) if j.kind == "effect"
                        and json.loads(j.payload)["effect"] == kind and j.status == DRY_RUN]

            for k in (key, work_key):
                await until("the review request decided", lambda k=k: effect("request_review", k), 30)
            await sim.submit_review(REPO, pr.number, user=COPILOT, body="Copilot reviewed and generated no comments.")
            await sim.submit_review(REPO, work.number, user=COPILOT, body="Copilot reviewed and generated 1 comment.",
                                    threads=[ThreadSpec(path="a.txt", line=1, body="finding one")])
            (merge,) = await until("the merge decided", lambda: effect("merge"), 30)
            assert merge.last_error.startswith("dry run: would have merged at ")
            # The author fixer's request (a comment) is not posted: nobody was asked, so the
            # round's deadline check is held and the PR says what it would have asked.
            (ask,) = await until("the fixer's ask decided", lambda: effect("comment", work_key), 30)
            assert ask.last_error.startswith("dry run: would have posted a comment")
            (check,) = [j for j in await jobs.list_jobs(db, work_key) if j.kind == "progress_check"]
            assert check.status == "queued" and check.last_error.startswith("dry run: held")
            asked = (await prs.get(db, work_key)).pr.last_action
            assert asked == "dry run: would have asked for a fix (author)"

            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
                rows = {r["pr_key"]: r["status"] for r in (await http.get("/api/prs")).json()}
                assert rows == {key: "merging", work_key: "converging"}
                assert "convergebot_dry_run_suppressed_total" in (await http.get("/metrics")).text
            assert github_writes(sim) == []
            assert sim.counters.get(method="GET") > 0
            would = [e for e in logged if e.get("event") == "dry_run.would"]
            assert {"react", "request_review", "merge"} <= {e["kind"] for e in would}
            assert all(e.get("pr_key") in (key, work_key) and e.get("summary") for e in would)
        finally:
            await db.dispose()
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), 15)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
            await reader
        assert proc.returncode == 0


async def test_serve_for_real_refuses_a_database_a_dry_run_decided_in(db_url):
    # A real run there would stay where the dry run stopped (a dry-run merge holds `merging`).
    from sqlalchemy import update

    from bot.config import ConfigError
    from bot.surfaces.serve import running
    from storage.migrate import migrate

    from ..serving import make_config

    db = Database(db_url)
    try:
        await migrate(db)
        job_id, _ = await jobs.enqueue(db, outbox.KIND, "effect:dry:1", pr_key="o/r#1")
        async with db.session() as s:
            await s.exec(update(Job).where(Job.id == job_id).values(status=DRY_RUN))
    finally:
        await db.dispose()
    with pytest.raises(ConfigError, match="holds a dry run's decisions"):
        async with running(make_config(db_url)):
            pass
    async with running(make_config(db_url, github={"dry_run": True})):
        pass  # the dry run itself goes on with its own database
