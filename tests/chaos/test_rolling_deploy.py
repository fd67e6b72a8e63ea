"""A rolling deploy on PostgreSQL (docs/operations.md, "Upgrades and rollbacks"): the previous
release (the commit `PREVIOUS_RELEASE`, checked out in a scratch worktree) serves alone on
its schema; the new release starts beside it and migrates the database under it; both serve
side by side behind one balancer while PRs converge; then the previous one stops and the new one
serves alone. Nothing crashes, every PR merges once, no write is made twice."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from simulator import Simulator, SimulatorServer
from storage.database import Database
from storage.migrate import current_revision, head_revision

from .bot_process import ROOT, BotProcess, free_port, to_toml
from .faults import Chaos
from .harness import bot_config, simulator_log
from .plan import PrPlan
from .replicas import Balancer, _until, log_lines, open_planned

# The release before this one: the last commit that landed before the schema's newest
# migrations (0014, 0015), tagged release-0013 where tags are fetched. Named by its hash, which
# every full clone of main holds (a clone need not carry tags). Move it on when a release lands.
PREVIOUS_RELEASE = "9c4cdbcf893a7ae9dd10928bbb3d6faeb2d5c925"
API_TOKEN = "rolling-api-token"
DEADLINE = 240.0

pytestmark = [pytest.mark.slow, pytest.mark.timeout(int(DEADLINE * 3 + 120))]


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()


def _schema_of(tree: Path) -> str:
    """The newest migration a tree holds: the schema its code was written for."""
    return max(re.match(r"(\d{4})_", p.name)[1] for p in (tree / "migrations" / "versions").glob("[0-9]*_*.py"))


def _crashes(log: Path) -> list[str]:
    """The lines of a bot's log that tell of a crash: a traceback, or an error a duty or worker
    logged because something failed that should not have."""
    bad = []
    for line in log.read_text(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            if "Traceback" in line or line.startswith(("TypeError", "AttributeError", "KeyError")):
                bad.append(line)
            continue
        if isinstance(event, dict) and (event.get("level") in ("error", "critical") or "exception" in event):
            bad.append(line[:400])
    return bad


def _started_at(log: Path) -> str:
    return next(e["timestamp"] for e in log_lines(log) if str(e.get("harness", "")).startswith("start"))


def _events_after(log: Path, at: str) -> set[str]:
    """The events a bot logged after `at` (both ISO stamps in UTC, as text)."""
    return {e["event"] for e in log_lines(log) if e.get("timestamp", "") > at and "event" in e}


async def _enroll(bot: BotProcess, plans: list[PrPlan]) -> None:
    async with httpx.AsyncClient(timeout=30, headers={"authorization": f"Bearer {API_TOKEN}"}) as http:
        for p in plans:
            answer = await http.post(f"{bot.url}/api/prs", json={"pr": p.key})
            assert answer.status_code in (200, 201), answer.text


async def test_the_previous_release_and_this_one_serve_side_by_side_across_the_migration(db_url, tmp_path):
    if not db_url.startswith("postgresql"):
        pytest.skip("replicas side by side need PostgreSQL: a SQLite file serves one process")
    try:
        _git("rev-parse", "--verify", f"{PREVIOUS_RELEASE}^{{commit}}")
    except subprocess.CalledProcessError:
        if _git("rev-parse", "--is-shallow-repository") == "true":
            pytest.skip(f"a shallow clone lacks the previous release {PREVIOUS_RELEASE[:12]}: clone main whole")
        pytest.fail(f"the previous release {PREVIOUS_RELEASE[:12]} is not in this clone's history")
    previous = tmp_path / "previous"
    _git("worktree", "add", "--detach", str(previous), PREVIOUS_RELEASE)
    old_schema = _schema_of(previous)
    assert old_schema < head_revision(), "the previous release must be older than this schema"

    # The database as the previous release left it: this release's rollback to its schema
    # (`migrate --to`, the documented rollback's first step).
    rolled = subprocess.run([sys.executable, "-m", "bot", "migrate", "--to", old_schema], cwd=ROOT,
                            env={"CONVERGEBOT_DATABASE_URL": db_url, "PATH": "/usr/bin:/bin"},
                            capture_output=True, text=True, timeout=120)
    assert rolled.returncode == 0, rolled.stderr
    db = Database(db_url)
    sim = Simulator(root=tmp_path / "github")
    chaos = Chaos(sim)
    plans = [PrPlan(i, "converge", (1,)) for i in range(1, 10)]  # two rounds each
    batches = [plans[0:3], plans[3:6], plans[6:9]]
    bots: list[BotProcess] = []
    try:
        assert await current_revision(db) == old_schema
        with simulator_log(tmp_path / "simulator.log"):
            async with SimulatorServer(sim, app=chaos.app) as server:
                await open_planned(sim, plans, tmp_path, "Rolling")
                for name, code in (("previous", previous), ("new", ROOT)):
                    port = free_port()
                    config = bot_config(db_url, server.url, port, tmp_path / "plan.json")
                    config["server"]["api_token"] = API_TOKEN
                    (tmp_path / f"{name}.toml").write_text(to_toml(config))
                    bots.append(BotProcess(tmp_path / f"{name}.toml", tmp_path / f"{name}.log", port,
                                           tmp_path / f"{name}-tmp", code=code))
                old, new = bots
                live: list[BotProcess] = [old]

                # The previous release alone, on its schema.
                await old.start()
                async with Balancer(live) as balancer:
                    sim.configure_webhooks(f"{balancer.url}/webhook", "chaos-webhook-secret")
                    await _enroll(old, batches[0])
                    await _until(db, batches[0], lambda views: any(v.pr.current_round >= 2 for v in views),
                                 DEADLINE, "a PR of the first batch in round 2")

                    # The new release starts beside it and migrates the schema under it.
                    await new.start()
                    assert await current_revision(db) == head_revision()
                    live.append(new)  # the balancer sends webhooks to both from now on
                    await _enroll(new, batches[1])
                    await _enroll(old, batches[1][:1])  # the previous one still takes enrollments
                    await _until(db, batches[0] + batches[1], lambda views: len(views) == 6 and all(
                        v.derived_status == "merged" for v in views), DEADLINE, "the first two batches merged")
                    assert old.exited is None and new.exited is None, "a replica stopped during the deploy"

                    # The previous release stops; the new one serves alone.
                    live.remove(old)
                    assert await old.terminate() == 0, old.tail()
                    await _enroll(new, batches[2])
                    await _until(db, plans, lambda views: len(views) == 9 and all(
                        v.derived_status == "merged" for v in views), DEADLINE, "every PR merged")
                    await sim.settle(timeout=10)
                assert await new.terminate() == 0, new.tail()
        merges = {p.number: sum(1 for e in sim.side_effects if e["kind"] == "merge" and e.get("number") == p.number)
                  for p in plans}
        assert set(merges.values()) == {1}, merges
        assert chaos.duplicates() == []
        for bot in bots:
            assert _crashes(bot.log_path) == [], (bot.log_path, _crashes(bot.log_path)[:5])
        # The previous release kept working on the migrated schema: it decided, fixed and merged
        # after the new one had started (and migrated).
        after = _events_after(old.log_path, _started_at(new.log_path))
        assert after & {"pr.merged", "progress.decided", "fix.finished", "pr.converged"}, sorted(after)
    finally:
        for b in bots:
            if b.exited is None and b.proc is not None:
                await b.kill()
        await db.dispose()
        await asyncio.to_thread(_git, "worktree", "remove", "--force", str(previous))
