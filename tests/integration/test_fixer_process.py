"""run_process: deadlines, process groups, bounded output."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bot.fixers import process
from bot.fixers.process import _pidfd_works, run_process

from .test_fixer_support import gone


@pytest.fixture(autouse=True, params=["worker thread", "asyncio"])
def starts(request, monkeypatch):
    """Each test with children started on a worker thread (where there is a pidfd) and with
    asyncio's own start on the loop (where there is none)."""
    if request.param == "asyncio":
        monkeypatch.setattr(process, "_pidfd_works", lambda: False)
    elif not _pidfd_works():
        pytest.skip("no pidfd here")
    return request.param


async def test_a_deadline_kills_children_and_grandchildren(tmp_path):
    pids = tmp_path / "pids.json"
    code = (
        "import json, os, subprocess, sys, time;"
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
        f"open({str(pids)!r}, 'w').write(json.dumps([os.getpid(), c.pid]));"
        "print('partial output', flush=True); time.sleep(60)"
    )
    started = time.monotonic()
    result = await run_process([sys.executable, "-c", code], cwd=tmp_path, env={}, timeout=1)

    assert time.monotonic() - started < 8
    assert result.timed_out and result.returncode is None and not result.ok
    assert result.stdout == "partial output\n"
    assert all(gone(pid) for pid in json.loads(pids.read_text()))


async def test_a_background_process_left_after_a_clean_exit_is_killed(tmp_path):
    pid_file = tmp_path / "pid"
    code = (
        "import subprocess, sys;"
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],"
        " stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL);"
        f"open({str(pid_file)!r}, 'w').write(str(c.pid)); print('done')"
    )
    result = await run_process([sys.executable, "-c", code], cwd=tmp_path, env={}, timeout=10)

    assert result.ok and result.stdout == "done\n"
    assert gone(int(pid_file.read_text()))


async def test_output_keeps_the_tail_within_the_cap(tmp_path):
    code = "import sys; sys.stdout.write('x' * 300000 + '\\nLAST LINE\\n')"
    result = await run_process(
        [sys.executable, "-c", code], cwd=tmp_path, env={}, timeout=10, output_cap=1000
    )
    assert len(result.stdout) == 1000 and result.stdout.endswith("x\nLAST LINE\n")


async def test_exit_codes_and_signals_are_described(tmp_path):
    code = (
        "import os, signal, sys;"
        "os.kill(os.getpid(), signal.SIGKILL) if sys.argv[1] == 'k' else sys.exit(5)"
    )
    five = await run_process([sys.executable, "-c", code, "e"], cwd=tmp_path, env={}, timeout=10)
    killed = await run_process([sys.executable, "-c", code, "k"], cwd=tmp_path, env={}, timeout=10)
    assert five.describe() == "exit code 5"
    assert killed.describe() == "killed by signal 9"


async def test_a_missing_program_raises_oserror(tmp_path):
    with pytest.raises(FileNotFoundError):
        await run_process([str(tmp_path / "nope")], cwd=tmp_path, env={}, timeout=1)


def _waitpid_threads() -> list[str]:
    """The threads Python 3.11's ThreadedChildWatcher starts, one per child it waits for."""
    return [t.name for t in threading.enumerate() if t.name.startswith("waitpid-")]


class _SlowStart:
    """subprocess.Popen that takes `seconds` before starting the child, as an exec from a slow
    filesystem would; it records the thread it ran on."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.threads: list[int] = []
        self.started: list[int] = []
        self.real = subprocess.Popen

    def __call__(self, *args, **kwargs):
        self.threads.append(threading.get_ident())
        time.sleep(self.seconds)
        popen = self.real(*args, **kwargs)
        self.started.append(popen.pid)
        return popen


async def _ticks_meanwhile(work) -> tuple[object, float]:
    """`work`'s result, and the longest the loop went without running another task meanwhile."""
    longest, last = 0.0, time.monotonic()
    task = asyncio.ensure_future(work)
    while not task.done():
        await asyncio.sleep(0.01)
        now = time.monotonic()
        longest, last = max(longest, now - last), now
    return await task, longest


@pytest.mark.parametrize("starts", ["worker thread"], indirect=True)
async def test_a_child_starts_on_a_worker_thread_and_ends_through_a_pidfd(tmp_path, monkeypatch):
    """The fork and exec never hold the loop, and asyncio's child watcher is not involved (on
    Python 3.11 it starts a thread per child)."""
    slow = _SlowStart(0.5)
    monkeypatch.setattr(subprocess, "Popen", slow)
    result, longest = await _ticks_meanwhile(run_process(
        [sys.executable, "-c", "import sys; print('hi'); sys.exit(3)"], cwd=tmp_path, env={}, timeout=10))
    assert (result.returncode, result.stdout) == (3, "hi\n")
    assert slow.threads and threading.get_ident() not in slow.threads
    assert longest < 0.4  # the start took 0.5 s, off the loop
    assert _waitpid_threads() == []


@pytest.mark.parametrize("starts", ["worker thread"], indirect=True)
async def test_a_run_cancelled_while_its_child_starts_leaves_no_child_behind(tmp_path, monkeypatch):
    slow = _SlowStart(0.5)
    monkeypatch.setattr(subprocess, "Popen", slow)
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    run = asyncio.create_task(run_process(sleeper, cwd=tmp_path, env={}, timeout=60))
    await asyncio.sleep(0.2)  # the worker thread is starting it
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    async with asyncio.timeout(10):  # the child starts all the same, then is killed and reaped
        while not slow.started:
            await asyncio.sleep(0.02)
        (pid,) = slow.started
        while Path(f"/proc/{pid}").exists():
            await asyncio.sleep(0.02)
