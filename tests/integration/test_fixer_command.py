"""CommandFixer against a real bare repository, with real fixer scripts."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from bot.fixers.base import ThreadAction
from bot.fixers.command import CommandFixer

from .test_fixer_support import (
    BRANCH,
    Remote,
    fixer_script,
    git,
    gone,
    make_remote,
    make_request,
)


@pytest.fixture
def remote(tmp_path) -> Remote:
    return make_remote(tmp_path / "remote")

COMMITS = """
record(head_at_start=sh("git", "rev-parse", "HEAD"), cwd=str(repo), argv=sys.argv,
       prompt_file=os.environ["CONVERGEBOT_PROMPT_FILE"], pr_key=os.environ["CONVERGEBOT_PR_KEY"],
       round=os.environ["CONVERGEBOT_ROUND"], repo_dir=os.environ["CONVERGEBOT_REPO_DIR"],
       prompt=pathlib.Path(os.environ["CONVERGEBOT_PROMPT_FILE"]).read_text())
for f in doc["findings"]:
    path = repo / f["path"]
    path.write_text(path.read_text() + "# fixed: " + f["body"] + "\\n")
sh("git", "commit", "-qam", "address findings")
print("agent: working... {not json}")
verdict()
print("agent: bye")
"""


def fixer(argv, tmp_path: Path, **kw) -> CommandFixer:
    return CommandFixer(argv, kw.pop("timeout_seconds", 20), workdir_root=tmp_path / "work", **kw)


def workspaces_left(tmp_path: Path) -> list[Path]:
    return list((tmp_path / "work").iterdir())


async def test_a_committing_fixer_moves_the_branch_one_commit_past_the_entry_head(remote, tmp_path):
    argv, record = fixer_script(
        tmp_path, COMMITS, "--prompt={prompt_file}", "{findings_file}", "{repo_dir}"
    )
    verdict = await fixer(argv, tmp_path).run(make_request(remote))

    new_head = remote.head()
    assert new_head != remote.entry_head
    assert remote.parent(new_head) == remote.entry_head
    assert verdict.pushed_head == new_head
    assert (verdict.status, verdict.finished, verdict.push_rejected) == ("addressed", True, False)
    assert verdict.summary == "did it"
    assert verdict.thread_actions == (
        ThreadAction("PRRT_1", "fixed", "done"),
        ThreadAction("PRRT_2", "fixed", "done"),
    )
    assert remote.show(new_head, "src/app.py").endswith("# fixed: add() subtracts")
    seen = json.loads(record.read_text())
    assert seen["head_at_start"] == remote.entry_head
    repo_dir = Path(seen["cwd"])
    prompt_file = Path(seen["prompt_file"])
    # Placeholders were substituted; inputs lived outside the work tree, never committed.
    findings_file = prompt_file.parent / "findings.json"
    assert seen["argv"][2:] == [f"--prompt={prompt_file}", str(findings_file), str(repo_dir)]
    assert seen["repo_dir"] == str(repo_dir)
    assert prompt_file.parent == repo_dir.parent
    assert (seen["pr_key"], seen["round"]) == ("acme/widgets#7", "3")
    assert "add() subtracts" in seen["prompt"] and "keep the public API unchanged" in seen["prompt"]
    assert git("ls-tree", "-r", "--name-only", new_head, cwd=remote.bare).split() == [
        "README.md", "src/app.py", "src/util.py"]
    # The workspace is gone.
    assert not repo_dir.exists() and not prompt_file.exists()
    assert workspaces_left(tmp_path) == []


async def test_changes_left_uncommitted_are_committed_and_pushed_by_the_bot(remote, tmp_path):
    argv, _ = fixer_script(tmp_path, """
        (repo / "src" / "app.py").write_text("def add(a, b):\\n    return a + b\\n")
        (repo / "NOTES.md").write_text("new, untracked\\n")
        verdict()
    """)
    verdict = await fixer(argv, tmp_path).run(make_request(remote))

    head = remote.head()
    assert verdict.pushed_head == head and remote.parent(head) == remote.entry_head
    assert remote.log_line(head, "%s|%an|%ae") == (
        "convergebot: address review (round 3)|convergebot|convergebot@users.noreply.github.com")
    assert "a + b" in remote.show(head, "src/app.py")
    assert remote.show(head, "NOTES.md") == "new, untracked"


async def test_a_push_by_someone_else_during_the_run_is_never_overwritten(remote, tmp_path):
    # The script pushes a human's commit from another clone before it exits: the race the
    # lease exists for. A plain or forced push would throw that commit away.
    argv, _ = fixer_script(tmp_path, f"""
        (repo / "src" / "app.py").write_text("fixed by the agent\\n")
        sh("git", "commit", "-qam", "agent fix")
        other = pathlib.Path(sys.argv[2])
        env = dict(os.environ, GIT_AUTHOR_NAME="Hu Man", GIT_COMMITTER_NAME="Hu Man")
        sh("git", "clone", "-q", "--branch", "{BRANCH}", sys.argv[3], str(other))
        (other / "HUMAN.md").write_text("mine\\n")
        subprocess.check_call(["git", "add", "HUMAN.md"], cwd=other)
        subprocess.check_call(["git", "commit", "-qm", "human"], cwd=other, env=env)
        subprocess.check_call(["git", "push", "-q", "origin", "HEAD"], cwd=other)
        human = subprocess.check_output(["git", "rev-parse", "HEAD"], cwd=other, text=True)
        record(human=human.strip())
        verdict()
    """)
    argv += [str(tmp_path / "human-clone"), remote.url]
    verdict = await fixer(argv, tmp_path).run(make_request(remote))

    human = json.loads((tmp_path / "record.json").read_text())["human"]
    assert remote.head() == human
    assert remote.show(human, "src/app.py") == "def add(a, b):\n    return a - b"
    assert verdict.push_rejected is True and verdict.pushed_head is None
    assert verdict.finished is True
    assert verdict.thread_actions == ()  # "fixed" would be a lie: the fix never landed
    assert workspaces_left(tmp_path) == []


async def test_a_branch_that_moved_before_the_clone_is_worked_on_at_entry_head(remote, tmp_path):
    human = remote.push_as_human()
    argv, record = fixer_script(tmp_path, COMMITS)
    verdict = await fixer(argv, tmp_path).run(make_request(remote))

    assert json.loads(record.read_text())["head_at_start"] == remote.entry_head
    assert verdict.push_rejected is True
    assert remote.head() == human


async def test_a_fixer_may_rewrite_the_entry_head_itself(remote, tmp_path):
    # The lease names the entry head, so replacing it (a rebase or an amend) is allowed.
    argv, _ = fixer_script(tmp_path, """
        (repo / "src" / "util.py").write_text("X = 2\\n")
        sh("git", "commit", "-q", "--amend", "-am", "feature work, amended")
        verdict()
    """)
    verdict = await fixer(argv, tmp_path).run(make_request(remote))

    head = remote.head()
    assert verdict.pushed_head == head
    assert remote.parent(head) == remote.parent(remote.entry_head)
    assert remote.show(head, "src/util.py") == "X = 2"


async def test_a_fixer_that_pushed_its_own_commit_is_reported_as_pushed(remote, tmp_path):
    argv, _ = fixer_script(tmp_path, f"""
        (repo / "README.md").write_text("pushed by the agent\\n")
        sh("git", "commit", "-qam", "self push")
        sh("git", "push", "-q", "origin", "HEAD:refs/heads/{BRANCH}")
        verdict()
    """)
    verdict = await fixer(argv, tmp_path).run(make_request(remote))

    assert verdict.push_rejected is False
    assert verdict.pushed_head == remote.head() != remote.entry_head


async def test_timeout_kills_the_whole_process_group_and_pushes_nothing(remote, tmp_path):
    argv, record = fixer_script(tmp_path, """
        (repo / "README.md").write_text("half done\\n")
        sh("git", "commit", "-qam", "half")
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        record(pids=[os.getpid(), child.pid])
        print(json.dumps({"status": "addressed"}), flush=True)
        time.sleep(60)
    """)
    started = time.monotonic()
    verdict = await fixer(argv, tmp_path, timeout_seconds=1).run(make_request(remote))

    assert time.monotonic() - started < 10
    assert verdict.finished is False
    assert verdict.detail == "timed out after 1s"
    assert verdict.pushed_head is None
    assert remote.head() == remote.entry_head
    for pid in json.loads(record.read_text())["pids"]:
        assert gone(pid), f"process {pid} survived the timeout"
    assert workspaces_left(tmp_path) == []


async def test_a_crash_without_a_verdict_is_a_husk_and_pushes_nothing(remote, tmp_path):
    argv, _ = fixer_script(tmp_path, """
        (repo / "README.md").write_text("half done\\n")
        sh("git", "commit", "-qam", "half")
        print("Traceback: something broke", file=sys.stderr)
        sys.exit(3)
    """)
    verdict = await fixer(argv, tmp_path).run(make_request(remote))

    assert (verdict.finished, verdict.detail, verdict.pushed_head) == (False, "exit code 3", None)
    assert remote.head() == remote.entry_head


async def test_a_crash_after_a_verdict_line_uses_the_verdict(remote, tmp_path):
    argv, _ = fixer_script(tmp_path, """
        print(json.dumps({"status": "needs_input", "question": "Keep the old API?"}), flush=True)
        sys.exit(2)
    """)
    verdict = await fixer(argv, tmp_path).run(make_request(remote))

    assert verdict.finished is True
    assert (verdict.status, verdict.question) == ("needs_input", "Keep the old API?")
    assert verdict.detail == "exit code 2"
    assert verdict.pushed_head is None and remote.head() == remote.entry_head


async def test_a_clean_exit_without_changes_or_verdict_is_a_finished_no_advance(remote, tmp_path):
    argv, _ = fixer_script(tmp_path, "print('nothing to do')\n")
    verdict = await fixer(argv, tmp_path).run(make_request(remote))

    assert (verdict.status, verdict.finished, verdict.pushed_head) == ("addressed", True, None)
    assert remote.head() == remote.entry_head


async def test_a_missing_program_is_a_husk(remote, tmp_path):
    verdict = await fixer([str(tmp_path / "no-such-agent")], tmp_path).run(make_request(remote))
    assert verdict.finished is False and "could not start" in verdict.detail
    assert workspaces_left(tmp_path) == []


async def test_a_missing_branch_is_a_husk_without_a_workspace_left(remote, tmp_path):
    argv, record = fixer_script(tmp_path, "record(ran=True)\n")
    verdict = await fixer(argv, tmp_path).run(make_request(remote, head_branch="gone"))

    assert verdict.finished is False and verdict.detail.startswith("git clone failed")
    assert not record.exists()
    assert workspaces_left(tmp_path) == []


@pytest.mark.parametrize("field,value", [
    ("head_branch", "--upload-pack=touch pwned"),
    ("head_branch", "bad..name"),
    ("entry_head", "HEAD"),
    ("clone_url", "ext::sh -c touch% pwned"),
    ("clone_url", "https://user:secret@example.com/r.git"),
])
async def test_hostile_request_fields_never_reach_git(remote, tmp_path, field, value):
    argv, record = fixer_script(tmp_path, "record(ran=True)\n")
    verdict = await fixer(argv, tmp_path).run(make_request(remote, **{field: value}))

    assert verdict.finished is False and "secret" not in (verdict.detail or "")
    assert not record.exists()
    assert not list(tmp_path.rglob("pwned"))
    assert remote.head() == remote.entry_head
