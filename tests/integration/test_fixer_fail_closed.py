"""The fixer fails closed: a push nobody can vouch for is not made, and a stopped run's agent is
killed and its workspace removed.

Right before it pushes, the fixer asks whether its run still owns the round
(`FixRequest.still_current`, a read of the database). A read that raises (the database gone
for a moment, a connection dropped) is a no: a push for a run nobody drives is the worse mistake,
and the round reruns. Apart from that read, the job's heartbeat cancels a fix job whose run was
stopped while its agent works: the agent's process is killed, its workspace deleted, nothing pushed.
Everything here is real: git, the simulator's repositories over HTTP, the bot's own stack.
"""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap
from pathlib import Path

from bot.fixers import build_fixer
from storage import jobs

from ..e2e.harness import REPO, bot_on_simulator, open_and_enroll, steps
from ..helpers import until
from .test_fixer_ownership import _agent, _branch_head, _file, _request


async def test_the_fixer_pushes_nothing_when_the_ownership_read_fails(tmp_path, api, sim):
    argv, gate = _agent(tmp_path)
    asked: list[int] = []

    async def still_current() -> bool:
        asked.append(1)
        raise ConnectionError("the database went away")

    req = await _request(api, sim, still_current)
    fixer = build_fixer("command", argv=argv, timeout_seconds=60, workdir_root=tmp_path / "work")
    task = asyncio.create_task(fixer.run(req))
    await until("the agent to start", lambda: _file(gate / "started"), every=0.02)
    (gate / "release").write_text("go")
    verdict = await asyncio.wait_for(task, 60)

    assert (gate / "committed").exists(), "the agent made its change"
    assert asked == [1], "asked once, right before the push"
    assert await _branch_head(api) == req.entry_head, "the branch did not move"
    assert [u for u in sim.ref_updates if u["via"] == "git"] == [], "no push reached the simulator"
    assert verdict.withheld and verdict.pushed_head is None and not verdict.finished
    assert "could not confirm" in verdict.detail and "ConnectionError" in verdict.detail


# The agent writes its pid and its working directory (the workspace's clone), then works until
# released or for a minute, and commits a change: pushed, it would move the branch.
SLOW_AGENT = textwrap.dedent('''
    import os, pathlib, subprocess, sys, time
    gate = pathlib.Path(sys.argv[1])
    (gate / "where").write_text(os.getcwd())
    (gate / "started").write_text(str(os.getpid()))
    deadline = time.monotonic() + 60
    while not (gate / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    pathlib.Path("app/core.py").write_text("# the agent's late change\\n")
    subprocess.run(["git", "commit", "-qam", "late change"], check=True)
''')


async def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as f:  # a zombie waiting to be reaped is gone too
        return f.read().split()[2] == "Z"


async def _removed(path: Path) -> bool:
    return not path.exists()


async def _dropped(h, key: str):
    found = [j for j in await jobs.list_jobs(h.rt.db, key) if j.kind == "fix"]
    return found if found and all(j.status == "dropped" for j in found) else None


async def test_a_stopped_run_s_fix_job_is_cancelled_its_agent_killed_and_its_workspace_removed(tmp_path, db_url):
    script, gate = tmp_path / "agent.py", tmp_path / "gate"
    script.write_text(SLOW_AGENT)
    gate.mkdir()
    work = tmp_path / "work"
    fixer = build_fixer("command", argv=[sys.executable, str(script), str(gate)], timeout_seconds=120,
                        workdir_root=work)
    # The heartbeat looks every third of the lease (2 s). The agent itself never finishes on
    # its own within the test's waits, so only the heartbeat can end it in time.
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer, jobs={"lease_seconds": 6},
                                poller={"interval_seconds": 3600}) as h:
        h.sim.set_reviewer(REPO, steps(1))
        key, number = await open_and_enroll(h)
        try:
            await h.wait_for("the agent to start", lambda: _file(gate / "started"))
            pid, clone = int((gate / "started").read_text()), Path((gate / "where").read_text())
            workspace = clone.parent
            assert workspace.parent == work and workspace.exists()
            head = await h.rt.github.branch_head("acme", "app", "feat")

            await h.sim.comment(REPO, number, "/converge stop", user="maint")
            await h.wait_status(key, "abandoned")
            await h.wait_for("the agent to be killed", lambda: _gone(pid), timeout=20)
            await h.wait_for("the workspace to be removed", lambda: _removed(workspace), timeout=20)
            await h.wait_for("the fix job dropped", lambda: _dropped(h, key), timeout=20)
            assert await h.rt.github.branch_head("acme", "app", "feat") == head, "nothing was pushed"
            assert [u for u in h.sim.ref_updates if u["via"] == "git"] == []
            assert list(work.iterdir()) == [], "a workspace was left behind"
        finally:
            (gate / "release").write_text("go")


class _InOrder:
    """The real command fixer, keeping each run's verdict in the order the runs started."""

    kind = "command"

    def __init__(self, argv: list[str], tmp_path: Path) -> None:
        self.inner = build_fixer("command", argv=argv, timeout_seconds=60, workdir_root=tmp_path / "work")
        self.started = 0
        self.verdicts: dict[int, object] = {}

    async def run(self, req):
        n = self.started
        self.started += 1
        self.verdicts[n] = await self.inner.run(req)
        return self.verdicts[n]


async def _runs_started(fixer: _InOrder, n: int) -> bool:
    return fixer.started >= n


async def test_a_run_stopped_and_started_again_while_its_agent_works_pushes_only_the_new_run_s_work(
        tmp_path, db_url):
    """The new run reaches the same round, converging, its own fixer at work: only the run's key
    tells the old agent's push from the new one's (the heartbeat's look is 100 s away)."""
    argv, gate = _agent(tmp_path)  # every run's agent (attempt 0) waits for the release
    fixer = _InOrder(argv, tmp_path)
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer, jobs={"lease_seconds": 300},
                                poller={"interval_seconds": 3600}) as h:
        h.sim.set_reviewer(REPO, steps(1))
        key, number = await open_and_enroll(h)
        await h.wait_for("the first run's agent", lambda: _runs_started(fixer, 1))
        old = (await h.view(key)).pr.process_key
        await h.sim.comment(REPO, number, "/converge stop", user="maint")
        await h.wait_status(key, "abandoned")
        await h.sim.comment(REPO, number, "/converge", user="maint")
        await h.wait_for("the second run's agent", lambda: _runs_started(fixer, 2), timeout=60)
        view = await h.view(key)
        assert view.pr.process_key != old and (view.derived_status, view.pr.current_round) == ("converging", 1)

        (gate / "release").write_text("go")

        async def both():
            return len(fixer.verdicts) == 2

        await h.wait_for("both runs' verdicts", both, timeout=60)
        stale, fresh = fixer.verdicts[0], fixer.verdicts[1]
        assert stale.withheld and stale.pushed_head is None, "the stopped run's agent pushed"
        assert fresh.pushed_head is not None
        assert await h.rt.github.branch_head("acme", "app", "feat") == fresh.pushed_head
