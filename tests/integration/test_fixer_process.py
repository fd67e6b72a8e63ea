"""run_process: deadlines, process groups, bounded output."""

from __future__ import annotations

import json
import sys
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
