"""The CLI as a user runs it: real processes on a real database."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bot.engine.submit import submit_pr
from storage import runs
from storage.database import Database
from storage.keys import parse_pr_key

from ..helpers import enroll, finish, until
from .resubmits import RESUBMIT_WRITES, finished_with_questions, resubmit_state

ROOT = Path(__file__).resolve().parents[2]

KEY = "acme/widgets#7"


def cli_env(db_url: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVERGEBOT_")}
    env["CONVERGEBOT_DATABASE_URL"] = db_url
    # No GitHub answers unless a test names one: `submit` then enrolls unchecked, wherever it runs.
    env["CONVERGEBOT_GITHUB_API_URL"] = "http://127.0.0.1:9/"
    return env


def convergebot(db_url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bot", *args], env=cli_env(db_url), capture_output=True, text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "args", [["submit", "acme/widgets"], ["status", "acme/widgets#x"], ["abandon", "not a key"],
             ["submit", "acme/widgets#0", "--no-merge"]],
)
def test_malformed_pr_key_is_one_line_and_exit_2(tmp_path, args):
    db_file = tmp_path / "untouched.db"
    p = convergebot(f"sqlite:///{db_file}", *args)
    bad = args[1]
    assert p.returncode == 2, p
    assert p.stderr.strip().splitlines() == [
        f"convergebot: error: malformed PR key {bad!r}: expected owner/repo#N"
    ]
    assert "Traceback" not in p.stdout + p.stderr
    assert not db_file.exists(), "bad input must not touch the database"


def test_invalid_config_names_the_key(db_url):
    env = cli_env(db_url) | {"CONVERGEBOT_JOBS_WORKERS": "lots"}
    p = subprocess.run([sys.executable, "-m", "bot", "status"], env=env, capture_output=True, text=True)
    assert p.returncode == 2
    assert "jobs.workers" in p.stderr and "CONVERGEBOT_JOBS_WORKERS" in p.stderr
    assert "Traceback" not in p.stderr


def test_submit_status_abandon_round_trip(db_url):
    assert convergebot(db_url, "migrate").returncode == 0
    p = convergebot(db_url, "submit", KEY, "--max-rounds", "3", "--no-merge")
    assert p.returncode == 0 and p.stdout.startswith(f"started {KEY} (run-")
    assert convergebot(db_url, "submit", KEY).stdout.startswith(f"already running {KEY}")

    status = json.loads(convergebot(db_url, "status", KEY, "--json").stdout)
    assert (status["status"], status["round"], status["max_rounds"], status["converge_only"]) == (
        "converging", 1, 3, True)
    # GitHub was not asked: the title falls back to the key until the engine fetches it.
    assert status["title"] == KEY
    table = convergebot(db_url, "status").stdout
    assert KEY in table and "converging" in table

    assert convergebot(db_url, "abandon", KEY).returncode == 0
    assert convergebot(db_url, "abandon", KEY).returncode == 1
    listed = json.loads(convergebot(db_url, "status", "--json").stdout)
    assert [(r["pr_key"], r["status"]) for r in listed] == [(KEY, "abandoned")]
    assert convergebot(db_url, "status", "other/repo#1").returncode == 1


# Run `convergebot submit` through bot.surfaces.cli.main after a common start signal, with the
# ownership read and the insert slowed so that all eight are inside submit_pr at once. Each says
# when it is ready (imported) and waits for the signal (a file); each ownership read prints its
# window, so the test sees that the submits did overlap.
_RACER = """
import asyncio, os, pathlib, sys, time
import storage.prs
_get = storage.prs.get
async def slow_get(*a, **kw):
    began = time.time()
    view = await _get(*a, **kw)
    await asyncio.sleep(0.3)
    print(f"read {began} {time.time()}", file=sys.stderr, flush=True)
    return view
storage.prs.get = slow_get
_insert = storage.prs.insert_new
async def slow_insert(*a, **kw):
    await asyncio.sleep(0.3)
    return await _insert(*a, **kw)
storage.prs.insert_new = slow_insert
from bot.surfaces.cli import main
here = pathlib.Path(sys.argv[1])
(here / f"ready-{os.getpid()}").touch()
while not (here / "go").exists():
    time.sleep(0.005)
raise SystemExit(main(["submit", sys.argv[2]]))
"""


def _overlapping(windows: list[tuple[float, float]]) -> int:
    """How many of the windows overlap one another: the most open at any one moment."""
    edges = sorted([(a, 1) for a, _ in windows] + [(b, -1) for _, b in windows])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


async def _active_runs(db_url: str) -> list:
    db = Database(db_url)
    try:
        return [r for r in await runs.runs_for(db, KEY) if r.state == "active"]
    finally:
        await db.dispose()


async def _make_terminal(db_url: str) -> None:
    db = Database(db_url)
    try:
        await enroll(db, KEY)
        await finish(db, KEY)
    finally:
        await db.dispose()


# Eight processes started together but left to their own timing (`python -m bot submit`) were
# run too; they overlap less than these, at the same cost (~3 s of CPU a process on a loaded
# machine), and the suite's time goes to the runs that race hardest.
@pytest.mark.slow
@pytest.mark.parametrize("terminal", [False, True], ids=["new", "terminal"])
def test_eight_concurrent_submit_processes_leave_one_active_run(db_url, terminal, tmp_path):
    if terminal:
        asyncio.run(_make_terminal(db_url))
    procs = [
        subprocess.Popen([sys.executable, "-c", _RACER, str(tmp_path), KEY], env=cli_env(db_url),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(8)
    ]
    deadline = time.monotonic() + 90
    while len(list(tmp_path.glob("ready-*"))) < 8:
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), "a racer never got ready"
        time.sleep(0.02)
    (tmp_path / "go").touch()
    outs = [p.communicate(timeout=90) for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, [o[1][-500:] for o in outs]
    windows = [(float(a), float(b)) for o in outs for line in o[1].splitlines()
               if line.startswith("read ") for a, b in [line.split()[1:3]]]
    assert _overlapping(windows) >= 2, f"the submits never raced: {windows}"
    started = [o[0] for o in outs if o[0].startswith("started")]
    assert len(started) == 1, [o[0] for o in outs]
    active = asyncio.run(_active_runs(db_url))
    assert len(active) == 1
    assert active[0].process_key in started[0]


# `convergebot submit` that stops after its n-th write (the statement ran, its transaction open),
# names the writes so far in a file, and waits there to be SIGKILLed.
_PARKED = """
import signal, sys
from pathlib import Path
from sqlalchemy import event
from sqlalchemy.engine import Engine
from tests.integration.resubmits import is_write
n, marker = int(sys.argv[1]), Path(sys.argv[2])
writes = []
@event.listens_for(Engine, "after_cursor_execute")
def park(conn, cursor, statement, *rest):
    if is_write(statement):
        writes.append(statement.split(chr(10))[0])
        if len(writes) == n:
            written = marker.with_suffix(".part")
            written.write_text(chr(10).join(writes))
            written.rename(marker)
            signal.pause()
from bot.surfaces.cli import main
raise SystemExit(main(["submit", sys.argv[3]]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("position", [1, RESUBMIT_WRITES], ids=["after-the-reopen", "before-the-commit"])
async def test_a_resubmit_killed_between_its_writes_leaves_the_pr_as_it_was_and_no_ghost_run(
        db, db_url, tmp_path, position):
    """A `convergebot submit` SIGKILLed in the middle of a resubmit (after the row's reopen, or
    after every write but before the commit) leaves the finished PR as it was: no run marked
    active that no row points at, which the API and dashboard would show as running for ever."""
    old = await finished_with_questions(db, KEY)
    marker = tmp_path / "parked"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _PARKED, str(position), str(marker), KEY, cwd=ROOT, env=cli_env(db_url),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        async def parked_or_exited() -> bool:
            return marker.exists() or proc.returncode is not None

        await until("the submit parked after a write", parked_or_exited, timeout=60)
        assert proc.returncode is None, (await proc.stderr.read()).decode()[-2000:]
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGKILL)
        await proc.wait()
    assert len(marker.read_text().splitlines()) == position

    assert await resubmit_state(db, KEY, old) == "old"
    assert (await submit_pr(db, parse_pr_key(KEY))).outcome == "started"
    assert await resubmit_state(db, KEY, old) == "reopened"
