"""run_process: deadlines, process groups, bounded output."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time

import pytest

from bot.fixers.process import run_process

from .test_fixer_support import gone


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


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="Python 3.12 and later watch children by pidfd")
async def test_inside_serve_children_end_through_a_pidfd_and_the_watcher_is_put_back(tmp_path):
    """No thread per child while `serve` runs (each one's start cost the loop), deadlines and
    exit codes as before; and the watcher that was there is back afterwards, since the pidfd
    one belongs to a loop that ends."""
    from bot.surfaces.serve import running
    from tests.serving import make_config

    before = asyncio.get_child_watcher()
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    async with running(make_config(f"sqlite:///{tmp_path / 'bot.db'}")):
        assert isinstance(asyncio.get_child_watcher(), asyncio.PidfdChildWatcher)
        running_child = asyncio.create_task(run_process(sleeper, cwd=tmp_path, env={}, timeout=60))
        await asyncio.sleep(0.3)  # a second child runs meanwhile; neither has a thread
        exited = await run_process([sys.executable, "-c", "import sys; sys.exit(3)"],
                                   cwd=tmp_path, env={}, timeout=10)
        assert not running_child.done(), "the first child ended: no two children ran at once"
        assert _waitpid_threads() == []
        assert exited.returncode == 3
        running_child.cancel()  # killed with its group on cancellation
        with pytest.raises(asyncio.CancelledError):
            await running_child
        assert (await run_process(sleeper, cwd=tmp_path, env={}, timeout=1)).timed_out
    assert asyncio.get_child_watcher() is before
    after = await run_process([sys.executable, "-c", "import sys; sys.exit(4)"], cwd=tmp_path, env={}, timeout=10)
    assert after.returncode == 4
