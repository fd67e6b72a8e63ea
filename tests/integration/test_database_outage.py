"""A database outage under a real `serve`: each worker says once that the database is unreachable
and once that it is back, looks again after growing pauses meanwhile, and the job that came due
during the outage runs once the database answers.

The outage is CONVERGEBOT_TEST_OUTAGE_SECONDS long (10 by default) with the workers' pauses
capped at a third of it (`[jobs] outage_backoff_cap_seconds`, 30 in production), so the test
sees them recover soon after. What it counts does not grow with the outage: a line per worker at
each change, and looks bounded by the pauses' schedule."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sqlite3
import sys
import time
from datetime import timedelta
from pathlib import Path

from sqlalchemy.engine import make_url

from bot.engine.submit import SubmitOptions, submit_pr
from storage import jobs
from storage.database import Database
from storage.keys import parse_pr_key
from storage.models import utcnow
from storage.statuses import JobKind
from tests.outage import Outage
from tests.simulator_fixtures import sim, simulator  # noqa: F401

from .test_cli import cli_env

REPO = "acme/widgets"
OUTAGE_SECONDS = float(os.environ.get("CONVERGEBOT_TEST_OUTAGE_SECONDS", "10"))
CAP_SECONDS = float(os.environ.get("CONVERGEBOT_TEST_OUTAGE_CAP_SECONDS", str(OUTAGE_SECONDS / 3)))
IDLE_POLL_SECONDS = 1.0  # the default: where the pauses start
WORKERS, FIXER_WORKERS = 8, 4  # the defaults: twelve workers, as the operator had
PASSWORD = "hunter2-outage"


def most_looks(seconds: float, base: float, cap: float) -> int:
    """The most failed looks a worker can make in `seconds`: the first, then one after each
    pause, each pause at least half its step (base doubling up to cap)."""
    looks, spent, step = 1, 0.0, base
    while spent + step / 2 <= seconds:
        spent += step / 2
        looks += 1
        step = min(cap, step * 2)
    return looks


class Serve:
    """`convergebot serve` as a process, its stderr read line by line as it comes."""

    def __init__(self, env: dict) -> None:
        self.env = env
        self.lines: list[str] = []
        self.proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task | None = None

    async def start(self) -> int:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", "serve", env=self.env,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
        self._reader = asyncio.create_task(self._read())
        (listening,) = await self.until("serve listening", lambda: self.events("server.listening")[:1], 60)
        return listening["port"]

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        while line := await self.proc.stderr.readline():
            self.lines.append(line.decode())

    def events(self, name: str, since: int = 0) -> list[dict]:
        found = []
        for line in self.lines[since:]:
            with contextlib.suppress(ValueError):
                if (event := json.loads(line)).get("event") == name:
                    found.append(event)
        return found

    async def until(self, what: str, check, timeout: float):
        deadline = time.monotonic() + timeout
        while not (found := check()):
            if self.proc is not None and self.proc.returncode is not None:
                raise AssertionError(f"serve exited with {self.proc.returncode} waiting for {what}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            await asyncio.sleep(0.05)
        return found

    async def stop(self) -> int:
        assert self.proc is not None and self._reader is not None
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return await asyncio.wait_for(self.proc.wait(), 30)
        finally:
            if self.proc.returncode is None:
                self.proc.kill()
                await self.proc.wait()
            await self._reader


class SqliteWriteLock:
    """Another process's write transaction held open on the SQLite file (an operator's `sqlite3`
    shell, a backup tool): every write waits out its busy timeout and fails "database is locked"."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.conn: sqlite3.Connection | None = None

    async def down(self) -> None:
        self.conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self.conn.execute("BEGIN IMMEDIATE")

    async def up(self) -> None:
        assert self.conn is not None
        self.conn.execute("ROLLBACK")
        self.conn.close()


async def _metric(port: int, name: str) -> float:
    import httpx

    async with httpx.AsyncClient() as http:
        text = (await http.get(f"http://127.0.0.1:{port}/metrics", timeout=10)).text
    (value,) = re.findall(rf"^{name} (\S+)$", text, re.MULTILINE)
    return float(value)


async def test_a_database_outage_is_one_line_per_worker_each_way_and_the_due_job_runs_after(
        db_url, sim, simulator):  # noqa: F811
    await sim.create_repo(REPO, files={"app.py": "one\n"})
    pr = await sim.open_pr(REPO, title="Change", head="feat", author="dev", files={"app.py": "two\n"})
    key = parse_pr_key(f"{REPO}#{pr.number}")
    postgres = make_url(db_url).get_backend_name() == "postgresql"
    if postgres:
        # The test server trusts every password: one in the URL shows none reaches a line.
        db_url = make_url(db_url).set(password=PASSWORD).render_as_string(hide_password=False)
        cut: Outage | SqliteWriteLock = Outage(db_url)
        await cut.up()
        served_url = cut.url_through
    else:
        cut = SqliteWriteLock(Path(make_url(db_url).database or ""))
        served_url = db_url
    db = Database(db_url)
    serve = Serve(cli_env(served_url) | {
        "CONVERGEBOT_SERVER_PORT": "0", "CONVERGEBOT_GITHUB_API_URL": simulator.url,
        "CONVERGEBOT_GITHUB_TOKEN": "t", "CONVERGEBOT_GITHUB_WEBHOOK_SECRET": "s",
        "CONVERGEBOT_JOBS_WORKERS": str(WORKERS), "CONVERGEBOT_JOBS_FIXER_WORKERS": str(FIXER_WORKERS),
        "CONVERGEBOT_JOBS_IDLE_POLL_SECONDS": str(IDLE_POLL_SECONDS),
        "CONVERGEBOT_JOBS_OUTAGE_BACKOFF_CAP_SECONDS": str(CAP_SECONDS),
        "CONVERGEBOT_POLLER_INTERVAL_SECONDS": "3600",
    })
    try:
        assert (await submit_pr(db, key, SubmitOptions())).outcome == "started"
        port = await serve.start()

        deadline = time.monotonic() + 60
        while not (stepped := [j for j in await jobs.list_jobs(db, key)
                               if j.kind == JobKind.SYNC and j.status == "done"]):
            assert time.monotonic() < deadline, "the PR's first step never ran"
            await asyncio.sleep(0.1)
        # A step of the PR falls due a second into the outage: it must run once it is over.
        due_id, _ = await jobs.enqueue(db, JobKind.SYNC, "outage-test", pr_key=key,
                                       process_key=stepped[0].process_key, run_at=utcnow() + timedelta(seconds=1))

        start = len(serve.lines)
        await cut.down()
        began = time.monotonic()
        if postgres:  # every worker's look fails
            await serve.until("every worker saying the database is unreachable",
                              lambda: len(serve.events("jobs.database_unreachable", start)) == WORKERS + FIXER_WORKERS,
                              OUTAGE_SECONDS + 30)
        else:  # the workers that saw the due job and could not claim it
            await serve.until("a worker saying the database is unreachable",
                              lambda: serve.events("jobs.database_unreachable", start), OUTAGE_SECONDS + 30)
        await asyncio.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - began)))
        outage = time.monotonic() - began
        await cut.up()

        def owners(event: str) -> set[str]:
            return {e["owner"] for e in serve.events(event, start)}

        # Who failed is read with who is back: a worker's "unreachable" logged just before the
        # cut ended may still be on its way through the pipe when the cut ends.
        await serve.until("every failing worker saying the database is back",
                          lambda: owners("jobs.database_back") == owners("jobs.database_unreachable"),
                          CAP_SECONDS + 30)
        failing = owners("jobs.database_unreachable")
        outage_lines = serve.lines[start:]

        deadline = time.monotonic() + 60
        while (job := await jobs.get_job(db, due_id)) is None or job.status != "done":
            assert time.monotonic() < deadline, f"the job due during the outage did not run: {job}"
            await asyncio.sleep(0.1)
        looks = await _metric(port, "convergebot_jobs_look_failures_total")
        assert await serve.stop() == 0
    finally:
        if serve.proc is not None and serve.proc.returncode is None:
            await serve.stop()
        await db.dispose()
        with contextlib.suppress(Exception):
            await cut.up()

    unreachable = serve.events("jobs.database_unreachable", start)
    back = serve.events("jobs.database_back", start)
    print(f"outage {outage:.1f} s, pauses capped at {CAP_SECONDS:g} s: {len(outage_lines)} lines "
          f"({sum(map(len, outage_lines))} bytes) from the cut until every worker was back; "
          f"{len(failing)} workers failed {looks:g} looks in all")
    assert len(outage_lines) < 50, "".join(outage_lines)
    assert sorted(e["owner"] for e in unreachable) == sorted(failing), "one line per worker when it fails"
    assert sorted(e["owner"] for e in back) == sorted(failing), "one line per worker when it recovers"
    assert all(e["failed_looks"] >= 1 for e in back)
    assert not [line for line in outage_lines if "Traceback" in line or '"exception"' in line]
    assert max(map(len, outage_lines)) < 1000
    # The pauses grow: no worker looked more often than the schedule allows.
    assert looks <= len(failing) * most_looks(outage + 1, IDLE_POLL_SECONDS, CAP_SECONDS)
    assert not [line for line in serve.lines if PASSWORD in line]
