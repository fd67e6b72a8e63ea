"""Stragglers of an older run write nothing; redelivered jobs replay; foreign pushes survive."""

from __future__ import annotations

import json
import sys
import textwrap

from sqlmodel import select

from bot.engine.fixing import fix
from bot.engine.progress import progress_check
from bot.fixers import ScriptedFixer
from storage import jobs
from storage.models import Job

from .harness import REPO, bot_on_simulator, open_and_enroll, quiesce, steps

QUIET = {"poller": {"interval_seconds": 3600}}  # only webhooks move things: rows stay still


async def _jobs(h, kind: str) -> list[Job]:
    async with h.rt.db.session() as s:
        return list(await s.exec(select(Job).where(Job.kind == kind).order_by(Job.id)))


def _row(view) -> dict:
    return view.pr.model_dump()


async def test_old_run_stragglers_write_nothing_and_replays_repeat_nothing(tmp_path, db_url):
    fixer = ScriptedFixer(["push", "noop", "noop"])
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer, **QUIET) as h:
        h.sim.set_reviewer(REPO, steps(1))
        key, number = await open_and_enroll(h)
        first = await h.wait_status(key, "escalated", timeout=30)  # round 1 pushed, round 2 no-advance
        old_key = first.pr.process_key
        old_checks = [j for j in await _jobs(h, "progress_check") if j.process_key == old_key and j.status == "done"]
        old_fixes = [j for j in await _jobs(h, "fix") if j.process_key == old_key]
        assert old_checks and old_fixes

        await h.sim.comment(REPO, number, "/converge stop", user="maint")
        await h.wait_status(key, "abandoned")
        await h.sim.comment(REPO, number, "/converge", user="maint")
        second = await h.wait_status(key, "escalated", timeout=30)  # the new run: no-advance again
        assert second.pr.process_key != old_key
        await quiesce(h)
        head = await h.rt.github.branch_head("acme", "app", "feat")
        before, effects = _row(await h.view(key)), len(h.sim.side_effects)

        # The old run's progress-checks and fixer, run again by hand past the pool's stale check:
        for job in old_checks:
            await progress_check(h.rt, job)
        for job in old_fixes:
            await fix(h.rt, job)
        # ...and re-queued, so the pool sees them: dropped without running.
        async with h.rt.db.session() as s:
            for job in old_checks:
                stale = await s.get(Job, job.id)
                stale.status, stale.lease_owner = "queued", None
        await h.wait_for("stale jobs dropped", lambda: _all_status(h, [j.id for j in old_checks], "dropped"))

        # The new run's own progress-check, redelivered with the same job key: it replays.
        new_check = [j for j in await _jobs(h, "progress_check")
                     if j.process_key == second.pr.process_key and j.status == "done"][-1]
        await progress_check(h.rt, new_check)

        await quiesce(h)
        after = _row(await h.view(key))
        assert after == before
        assert len(h.sim.side_effects) == effects, "nothing was posted, pushed or resolved"
        # The old run's escalation went stale at resubmit; the new run's is open; none added.
        assert [e.status for e in await h.escalations(key)] == ["stale", "open"]
        assert await h.rt.github.branch_head("acme", "app", "feat") == head


async def _all_status(h, ids: list[int], status: str) -> bool:
    for i in ids:
        if (await jobs.get_job(h.rt.db, i)).status != status:
            return False
    return True


RIVAL_SCRIPT = textwrap.dedent('''
    import json, os, pathlib, subprocess, tempfile
    doc = json.load(open(os.environ["CONVERGEBOT_FINDINGS_FILE"]))
    origin = subprocess.run(["git", "remote", "get-url", "origin"], capture_output=True, text=True,
                            check=True).stdout.strip()
    # Someone else pushes to the branch while the agent works.
    other = tempfile.mkdtemp()
    subprocess.run(["git", "clone", "-q", "--branch", doc["head_branch"], origin, other], check=True)
    pathlib.Path(other, "HUMAN.md").write_text("a person's change\\n")
    subprocess.run(["git", "-C", other, "add", "HUMAN.md"], check=True)
    subprocess.run(["git", "-C", other, "commit", "-qm", "human change"], check=True)
    subprocess.run(["git", "-C", other, "push", "-q", "origin", "HEAD:" + doc["head_branch"]], check=True)
    pathlib.Path("app/core.py").write_text("# the agent's change\\n")
    subprocess.run(["git", "commit", "-qam", "agent change"], check=True)
    print(json.dumps({"status": "addressed", "summary": "rewrote core"}))
''')


async def test_a_push_by_someone_else_during_a_fixer_run_is_never_overwritten(tmp_path, db_url):
    script = tmp_path / "agent.py"
    script.write_text(RIVAL_SCRIPT)
    # Unsandboxed: the agent also plays the person, pushing to the simulator's repository.
    config = {"kind": "command", "command": [sys.executable, str(script)], "sandbox": "off"}
    async with bot_on_simulator(tmp_path, db_url, fixer_config=config) as h:
        h.sim.set_reviewer(REPO, steps(1, 0))
        key, number = await open_and_enroll(h)

        async def round_two():
            v = await h.view(key)
            return v if v is not None and v.pr.current_round == 2 else None

        await h.wait_for("round 2", round_two, timeout=30)
        (round1, *_) = await h.rounds(key)
        # The branch head is the person's commit; the agent's change never replaced it.
        head = await h.rt.github.branch_head("acme", "app", "feat")
        assert round1.exit_head == head
        proc = await _git_show(tmp_path, h, head)
        assert proc["message"] == "human change" and proc["HUMAN.md"] == "a person's change\n"
        assert "the agent's change" not in proc["app/core.py"]


async def _git_show(tmp_path, h, sha: str) -> dict:
    import asyncio

    (repo,) = [p for p in (tmp_path / "github").rglob("*.git") if p.is_dir() and p.name == "app.git"]

    async def git(*args: str) -> str:
        p = await asyncio.create_subprocess_exec("git", "--git-dir", str(repo), *args,
                                                 stdout=asyncio.subprocess.PIPE)
        out, _ = await p.communicate()
        return out.decode()

    return {"message": (await git("log", "-1", "--format=%s", sha)).strip(),
            "HUMAN.md": await git("show", f"{sha}:HUMAN.md"),
            "app/core.py": await git("show", f"{sha}:app/core.py")}


class _OvertakenFixer:
    """A fixer whose round is rerun (deadline passed) while it still works."""

    kind = "fake"

    def __init__(self) -> None:
        self.h = None

    async def run(self, req):
        from bot.fixers.base import Verdict
        from storage import rounds
        from storage.models import utcnow

        view = await self.h.view(req.pr_key)
        async with self.h.rt.db.session() as s:  # what the deadline's rerun writes
            await rounds.next_attempt(s, req.pr_key, view.pr.process_key, req.round_no,
                                      {**rounds.VERDICT_FIELDS, "fixer_started_at": utcnow()})
        return Verdict(status="needs_input", question="A late question?", summary="late")


async def test_a_slow_fixer_s_verdict_never_lands_on_the_next_attempt(tmp_path, db_url):
    from storage import rounds

    fixer = _OvertakenFixer()
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer, **QUIET) as h:
        fixer.h = h
        h.sim.set_reviewer(REPO, steps(1))
        key, _ = await open_and_enroll(h)

        async def fixed_once():
            return [j for j in await _jobs(h, "fix") if j.status == "done"]

        await h.wait_for("the fix job", fixed_once, timeout=30)
        await quiesce(h)
        view = await h.view(key)
        rnd = await rounds.get(h.rt.db, key, view.pr.process_key, 1)
        assert (rnd.attempt, rnd.verdict, rnd.summary, rnd.fixer_finished_at) == (1, None, None, None)
        assert rnd.fixer_started_at is not None
        assert await h.escalations(key) == [] and view.pr.status == "converging"


SLOW_AGENT = textwrap.dedent('''
    import os, pathlib, subprocess, sys, time
    pathlib.Path(sys.argv[1]).write_text(str(os.getpid()))
    time.sleep(60)
    pathlib.Path("app/core.py").write_text("# too late\\n")
    subprocess.run(["git", "commit", "-qam", "too late"], check=True)
''')


async def test_stop_cancels_a_running_fixer_and_nothing_is_pushed(tmp_path, db_url):

    script, pid_file = tmp_path / "agent.py", tmp_path / "agent.pid"
    script.write_text(SLOW_AGENT)
    # Unsandboxed: the test watches the agent's process by the pid it writes.
    config = {"kind": "command", "command": [sys.executable, str(script), str(pid_file)],
              "sandbox": "off"}
    # The heartbeat finds the stopped run's job orphaned within a third of the lease.
    async with bot_on_simulator(tmp_path, db_url, fixer_config=config, jobs={"lease_seconds": 6}) as h:
        h.sim.set_reviewer(REPO, steps(1))
        key, number = await open_and_enroll(h)
        await h.wait_for("the agent to start", lambda: _exists(pid_file), timeout=30)
        pid = int(pid_file.read_text())
        head = await h.rt.github.branch_head("acme", "app", "feat")
        await h.sim.comment(REPO, number, "/converge stop", user="maint")
        await h.wait_status(key, "abandoned")
        await h.wait_for("the agent to be killed", lambda: _gone(pid), timeout=30)
        (job,) = await _jobs(h, "fix")
        await h.wait_for("the fix job dropped", lambda: _all_status(h, [job.id], "dropped"), timeout=30)
        assert await h.rt.github.branch_head("acme", "app", "feat") == head


async def _exists(path) -> bool:
    return path.exists() and path.read_text().strip() != ""


async def _gone(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as f:  # a zombie waiting to be reaped is gone too
        return f.read().split()[2] == "Z"


class _DiesAfterItsPush:
    """A fixer whose first run pushes its fix and then dies before its verdict is recorded (as
    a process killed between the push and that write would); every later run behaves."""

    kind = "fake"

    def __init__(self) -> None:
        self.inner = ScriptedFixer(["push"])
        self.runs: list[tuple[str, str | None]] = []  # (entry head, pushed head) of each run

    async def run(self, req):
        verdict = await self.inner.run(req)
        self.runs.append((req.entry_head, verdict.pushed_head))
        if len(self.runs) == 1:
            raise RuntimeError("the process died after the push")
        return verdict


async def test_a_fixer_try_that_pushed_and_died_still_answers_its_round(tmp_path, db_url):
    """The fix job's retry finds the branch moved by its own lost try: the fixer runs again on
    the moved head and its verdict answers the round's threads. Left unanswered, they stayed
    open, and the next review's round took them up again as findings (three rounds, not two)."""
    fixer = _DiesAfterItsPush()
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer, **QUIET) as h:
        h.sim.set_reviewer(REPO, steps(2, 0))
        key, _ = await open_and_enroll(h)
        await h.wait_status(key, "merged", timeout=60)
        threads = list(h.sim.state.threads.values())
        assert len(threads) == 2 and all(t.is_resolved for t in threads), "the round's threads answered"
        assert len(fixer.runs) == 2, f"the fixer ran again after its lost try: {fixer.runs}"
        (first_entry, first_push), (second_entry, second_push) = fixer.runs
        assert first_push is not None and first_push != first_entry
        assert second_entry == first_push and second_push is not None  # leased on the moved head
        round_findings = [len(json.loads(r.findings or "[]")) for r in await h.rounds(key)]
        assert round_findings == [2, 0]
        assert await h.escalations(key) == []
