"""Shared pieces for the fixer integration tests: a real bare repository and a request for it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from bot.fixers.base import FixRequest
from bot.rules.model import Finding

BRANCH = "feature/fix-me"
HUMAN = {"GIT_AUTHOR_NAME": "Hu Man", "GIT_AUTHOR_EMAIL": "human@example.com",
         "GIT_COMMITTER_NAME": "Hu Man", "GIT_COMMITTER_EMAIL": "human@example.com"}


def git_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_TERMINAL_PROMPT="0",
               **HUMAN, **extra)
    return env


def git(*args: str, cwd: Path) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, env=git_env(), capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, f"git {args}: {done.stderr}"
    return done.stdout.strip()


@dataclass
class Remote:
    """A bare repository standing in for GitHub, with BRANCH at `entry_head`."""

    bare: Path
    scratch: Path
    entry_head: str

    @property
    def url(self) -> str:
        return self.bare.as_uri()

    def head(self, branch: str = BRANCH) -> str:
        return git("rev-parse", f"refs/heads/{branch}", cwd=self.bare)

    def parent(self, sha: str) -> str:
        return git("rev-parse", f"{sha}^", cwd=self.bare)

    def show(self, rev: str, path: str) -> str:
        return git("show", f"{rev}:{path}", cwd=self.bare)

    def log_line(self, rev: str, fmt: str) -> str:
        return git("log", "-1", f"--format={fmt}", rev, cwd=self.bare)

    def push_as_human(self, path: str = "HUMAN.md", text: str = "a human was here\n") -> str:
        """Another clone pushes a commit to BRANCH, as a person would while the bot works."""
        git("fetch", "-q", "origin", cwd=self.scratch)
        git("checkout", "-q", "-B", BRANCH, f"origin/{BRANCH}", cwd=self.scratch)
        (self.scratch / path).write_text(text)
        git("add", path, cwd=self.scratch)
        git("commit", "-qm", "human change", cwd=self.scratch)
        git("push", "-q", "origin", f"HEAD:refs/heads/{BRANCH}", cwd=self.scratch)
        return git("rev-parse", "HEAD", cwd=self.scratch)


def make_remote(root: Path) -> Remote:
    root.mkdir(parents=True, exist_ok=True)
    bare, scratch = root / "origin.git", root / "scratch"
    git("init", "-q", "--bare", "--initial-branch=main", str(bare), cwd=root)
    git("clone", "-q", bare.as_uri(), str(scratch), cwd=root)
    git("checkout", "-q", "-b", "main", cwd=scratch)
    (scratch / "src").mkdir()
    (scratch / "src" / "app.py").write_text("def add(a, b):\n    return a - b\n")
    (scratch / "README.md").write_text("# demo\n")
    git("add", "-A", cwd=scratch)
    git("commit", "-qm", "initial", cwd=scratch)
    git("push", "-q", "origin", "main", cwd=scratch)
    git("checkout", "-q", "-b", BRANCH, cwd=scratch)
    (scratch / "src" / "util.py").write_text("X = 1\n")
    git("add", "-A", cwd=scratch)
    git("commit", "-qm", "feature work", cwd=scratch)
    git("push", "-q", "origin", BRANCH, cwd=scratch)
    return Remote(bare, scratch, git("rev-parse", "HEAD", cwd=scratch))


@pytest.fixture
def remote(tmp_path) -> Remote:
    return make_remote(tmp_path / "remote")


FINDINGS = (
    Finding("PRRT_1", 101, "src/app.py", 2, "add() subtracts", "copilot", "fp-1"),
    Finding("PRRT_2", 102, "src/util.py", 1, "X needs a docstring", "alice", "fp-2"),
)


def make_request(remote: Remote, **overrides) -> FixRequest:
    fields = dict(
        pr_key="acme/widgets#7",
        round_no=3,
        attempt=0,
        title="Add calculator",
        description="Adds add().",
        head_branch=BRANCH,
        entry_head=remote.entry_head,
        clone_url=remote.url,
        token=None,
        findings=FINDINGS,
        instructions=("@maintainer: keep the public API unchanged",),
    )
    fields.update(overrides)
    return FixRequest(**fields)


PRELUDE = """\
import json, os, pathlib, subprocess, sys, time
RECORD = pathlib.Path(sys.argv[1])
repo = pathlib.Path.cwd()
doc = json.loads(pathlib.Path(os.environ["CONVERGEBOT_FINDINGS_FILE"]).read_text())
def sh(*args):
    return subprocess.check_output(args, text=True).strip()
def record(**values):
    old = json.loads(RECORD.read_text()) if RECORD.exists() else {}
    old.update(values)
    RECORD.write_text(json.dumps(old))
def verdict(status="addressed", action="fixed", **more):
    threads = [{"id": f["thread_id"], "action": action, "reason": "done"} for f in doc["findings"]]
    print(json.dumps({"status": status, "summary": "did it", "threads": threads, **more}))
"""


def fixer_script(tmp_path: Path, body: str, *extra_argv: str) -> tuple[list[str], Path]:
    """A Python fixer command: PRELUDE + `body`; returns (argv, the file it records into)."""
    script = tmp_path / f"fixer_{abs(hash(body))}.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    record = tmp_path / "record.json"
    return [sys.executable, str(script), str(record), *extra_argv], record


def test_the_remote_has_the_branch_at_its_entry_head(remote):
    assert remote.head() == remote.entry_head
    assert remote.show(remote.entry_head, "src/util.py") == "X = 1"


def _alive(pid: int) -> bool:
    """True while `pid` runs (a zombie waiting for a reaper counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def gone(pid: int, within: float = 3.0) -> bool:
    """`pid` ends within `within` seconds (SIGKILL lands asynchronously)."""
    deadline = time.monotonic() + within
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_alive_sees_this_process():
    assert _alive(os.getpid()) and not gone(os.getpid(), within=0.1)
