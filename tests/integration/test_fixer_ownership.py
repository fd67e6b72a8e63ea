"""A fixer whose run or attempt stopped owning the round while its agent worked pushes nothing.

The worker's heartbeat cancels such a fix job, but only every third of a lease; an agent that
exits in between used to push anyway. The fixer now asks, right before the push, whether its
run still owns the PR with this attempt still the round's (`FixRequest.still_current`).
Everything here is real: git, the simulator's repositories over HTTP, the bot's own stack.
"""

from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path

import httpx

from bot.engine.progress import progress_check
from bot.fixers import build_fixer
from bot.fixers.base import FixRequest
from storage import jobs

from ..e2e.harness import REPO, bot_on_simulator, open_and_enroll, steps
from ..helpers import until

# The agent of attempt 0 says it started, waits for the test to release it, then commits a
# change (and says so); any later attempt changes nothing. Its wait has its own deadline.
AGENT = textwrap.dedent('''
    import json, os, pathlib, subprocess, sys, time
    gate = pathlib.Path(sys.argv[1])
    attempt = os.environ["CONVERGEBOT_ATTEMPT"]
    if attempt == "0":
        (gate / "started").write_text(str(os.getpid()))
        deadline = time.monotonic() + 60
        while not (gate / "release").exists():
            if time.monotonic() > deadline:
                sys.exit(3)
            time.sleep(0.02)
        pathlib.Path("app/core.py").write_text("# the agent's late change\\n")
        subprocess.run(["git", "commit", "-qam", "late change"], check=True)
        (gate / "committed").write_text("yes")
    print(json.dumps({"status": "addressed", "summary": "attempt " + attempt}))
''')


def _agent(tmp_path: Path) -> tuple[list[str], Path]:
    script, gate = tmp_path / "agent.py", tmp_path / "gate"
    script.write_text(AGENT)
    gate.mkdir()
    return [sys.executable, str(script), str(gate)], gate


async def _file(path: Path) -> bool:
    return path.exists()


class _Verdicts:
    """The real command fixer, keeping the verdict of every run."""

    kind = "command"

    def __init__(self, argv: list[str], tmp_path: Path) -> None:
        self.inner = build_fixer("command", argv=argv, timeout_seconds=60, workdir_root=tmp_path / "work")
        self.verdicts: dict[int, object] = {}  # attempt -> verdict

    async def run(self, req: FixRequest):
        verdict = await self.inner.run(req)
        self.verdicts[req.attempt] = verdict
        return verdict


# -- the fixer on its own, against the simulator's repository -------------------------------------


async def _request(api: httpx.AsyncClient, sim, still_current) -> FixRequest:
    await sim.create_repo(REPO, files={"app/core.py": "def f():\n    return 1\n"})
    pr = await sim.open_pr(REPO, title="Change", head="feat", author="dev",
                           files={"app/core.py": "def f():\n    return 2\n"})
    gh = (await api.get(f"/repos/{REPO}/pulls/{pr.number}")).json()
    return FixRequest(
        pr_key=f"{REPO}#{pr.number}", round_no=1, attempt=0, title="Change", description="",
        head_branch="feat", entry_head=gh["head"]["sha"], clone_url=gh["head"]["repo"]["clone_url"],
        token=None, findings=(), instructions=(), still_current=still_current)


async def _branch_head(api: httpx.AsyncClient) -> str:
    answer = await api.get(f"/repos/{REPO}/git/ref/heads/feat")
    answer.raise_for_status()
    return answer.json()["object"]["sha"]


async def _run_stopping_midway(tmp_path, api, sim, owns_at_push: bool):
    """Run the fixer; while its agent works the run stops owning the round (unless told not to)."""
    argv, gate = _agent(tmp_path)
    owner = {"current": True, "asked": 0}

    async def still_current() -> bool:
        owner["asked"] += 1
        return owner["current"]

    req = await _request(api, sim, still_current)
    fixer = build_fixer("command", argv=argv, timeout_seconds=60, workdir_root=tmp_path / "work")
    task = asyncio.create_task(fixer.run(req))
    await until("the agent to start", lambda: _file(gate / "started"), every=0.02)
    owner["current"] = owns_at_push  # e.g. `/converge stop` lands while the agent works
    (gate / "release").write_text("go")
    verdict = await asyncio.wait_for(task, 60)
    assert (gate / "committed").exists(), "the agent made its change"
    return req, verdict, owner["asked"]


async def test_the_command_fixer_pushes_nothing_once_its_run_no_longer_owns_the_round(tmp_path, api, sim):
    req, verdict, asked = await _run_stopping_midway(tmp_path, api, sim, owns_at_push=False)

    assert await _branch_head(api) == req.entry_head, "the branch did not move"
    assert [u for u in sim.ref_updates if u["via"] == "git"] == [], "no push reached the simulator"
    assert asked == 1, "asked once, after the agent exited"
    assert verdict.withheld and verdict.pushed_head is None and not verdict.push_rejected
    assert not verdict.finished, "were it ever recorded, it reads as a husk, never as progress"
    assert "not pushed" in verdict.detail


async def test_the_command_fixer_still_pushes_while_its_run_owns_the_round(tmp_path, api, sim):
    req, verdict, asked = await _run_stopping_midway(tmp_path, api, sim, owns_at_push=True)

    head = await _branch_head(api)
    assert head != req.entry_head and verdict.pushed_head == head and asked == 1
    assert not verdict.withheld and verdict.finished


# -- the bot: the run stops, or the round's attempt is rerun, while the agent works ---------------

SLOW_HEARTBEAT = {"lease_seconds": 300}  # the heartbeat's ownership check is 100 s away


async def _fix_job(h, key: str, attempt: int):
    for job in await jobs.list_jobs(h.rt.db, key):
        if job.kind == "fix" and job.key.endswith(f":{attempt}"):
            return job
    return None


async def test_a_run_stopped_while_its_agent_works_pushes_nothing(tmp_path, db_url):
    argv, gate = _agent(tmp_path)
    fixer = _Verdicts(argv, tmp_path)
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer, jobs=SLOW_HEARTBEAT) as h:
        h.sim.set_reviewer(REPO, steps(1))
        key, number = await open_and_enroll(h)
        await h.wait_for("the agent to start", lambda: _file(gate / "started"))
        head = await h.rt.github.branch_head("acme", "app", "feat")

        await h.sim.comment(REPO, number, "/converge stop", user="maint")
        await h.wait_status(key, "abandoned")
        (gate / "release").write_text("go")  # the agent exits long before any heartbeat

        async def verdict():
            return fixer.verdicts.get(0)

        seen = await h.wait_for("the fixer's verdict", verdict)
        assert (gate / "committed").exists(), "the agent made its change"
        assert await h.rt.github.branch_head("acme", "app", "feat") == head, "nothing was pushed"
        assert seen.withheld and seen.pushed_head is None
        job = await _fix_job(h, key, 0)
        await h.wait_for("the fix job to end", lambda: _job_done(h, job.id))
        (rnd,) = await h.rounds(key)
        assert (rnd.verdict, rnd.fixer_finished_at) == (None, None), "no verdict for a stopped run"


async def test_an_attempt_rerun_while_its_agent_works_pushes_nothing(tmp_path, db_url):
    argv, gate = _agent(tmp_path)
    fixer = _Verdicts(argv, tmp_path)
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer, jobs=SLOW_HEARTBEAT) as h:
        h.sim.set_reviewer(REPO, steps(1))
        key, number = await open_and_enroll(h)
        await h.wait_for("the agent to start", lambda: _file(gate / "started"))
        head = await h.rt.github.branch_head("acme", "app", "feat")

        # The round's deadline check runs now (as if the agent had overrun it): attempt 1 starts.
        (deadline,) = [j for j in await jobs.list_jobs(h.rt.db, key)
                       if j.kind == "progress_check" and j.key.endswith(":1:0:deadline")]
        await progress_check(h.rt, deadline)
        await h.wait_for("attempt 1's fix job", lambda: _fix_job(h, key, 1))
        (gate / "release").write_text("go")

        async def both():
            return 0 in fixer.verdicts and 1 in fixer.verdicts

        await h.wait_for("both attempts' verdicts", both)
        assert (gate / "committed").exists(), "attempt 0's agent made its change"
        assert await h.rt.github.branch_head("acme", "app", "feat") == head, "nothing was pushed"
        late = fixer.verdicts[0]
        assert late.withheld and late.pushed_head is None
        view = await h.view(key)
        (rnd,) = await h.rounds(key)
        assert rnd.attempt == 1 and view.pr.husk_retries == 1


async def _job_done(h, job_id: int) -> bool:
    return (await jobs.get_job(h.rt.db, job_id)).status == "done"
