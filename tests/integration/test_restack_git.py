"""Re-basing a stacked PR's own commits (bot/fixers/restack.py) with real git against a bare
repository: only the child's commits replayed onto the new base, the push leased on the head the
bot read, nothing rewritten when the parent landed as its own commits, a recorded fork point not
in the child's history passed over, a conflict left for the merge stage."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bot.fixers.environment import GitIdentity
from bot.fixers.restack import Restack, replay

ENV = {"GIT_AUTHOR_NAME": "dev", "GIT_AUTHOR_EMAIL": "dev@example.com", "GIT_COMMITTER_NAME": "dev",
       "GIT_COMMITTER_EMAIL": "dev@example.com", "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1",
       "PATH": "/usr/bin:/bin"}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=ENV, check=True, capture_output=True, text=True).stdout.strip()


class Repo:
    """A bare repository (the remote) and a working clone that builds its history."""

    def __init__(self, root: Path) -> None:
        self.bare, self.work = root / "remote.git", root / "work"
        git(root, "init", "--quiet", "--bare", "-b", "main", str(self.bare))
        git(root, "clone", "--quiet", str(self.bare), str(self.work))
        self.commit("main", {"README.md": "# app\n"}, "initial", start=None)

    @property
    def url(self) -> str:
        return self.bare.as_uri()

    def commit(self, branch: str, files: dict[str, str], message: str, start: str | None = "main") -> str:
        if start is None:
            git(self.work, "checkout", "--quiet", "--orphan", branch)
        else:
            git(self.work, "checkout", "--quiet", "-B", branch, start)
        for name, text in files.items():
            (self.work / name).parent.mkdir(parents=True, exist_ok=True)
            (self.work / name).write_text(text)
            git(self.work, "add", name)
        git(self.work, "commit", "--quiet", "-m", message)
        git(self.work, "push", "--quiet", "--force", "origin", f"{branch}:{branch}")
        return git(self.work, "rev-parse", "HEAD")

    def head(self, branch: str) -> str:
        return git(self.bare, "rev-parse", f"refs/heads/{branch}")

    def own_commits(self, branch: str, base: str = "main") -> list[str]:
        return git(self.bare, "log", "--format=%s", f"{base}..{branch}").splitlines()

    def contains(self, branch: str, sha: str) -> bool:
        return subprocess.run(["git", "merge-base", "--is-ancestor", sha, f"refs/heads/{branch}"], cwd=self.bare,
                              env=ENV).returncode == 0


@pytest.fixture
def stack(tmp_path) -> tuple[Repo, str, str]:
    """main ← parent (one commit) ← child (one commit); the parent then squash-merged onto main
    (a commit of its changes, not its commit). Returns the repo, the parent's head, the child's."""
    repo = Repo(tmp_path)
    parent = repo.commit("parent", {"app/a.py": "A = 1\n"}, "parent's change")
    child = repo.commit("child", {"app/b.py": "B = 1\n"}, "child's change", start="parent")
    repo.commit("main", {"app/a.py": "A = 1\n"}, "parent's change (#1)")  # the squash
    return repo, parent, child


async def _replay(repo: Repo, head: str, fork_points: tuple[str, ...], tmp_path: Path):
    return await replay(Restack(repo.url, None, "child", head, "main", fork_points), identity=GitIdentity(),
                        git_timeout=60, workdir_root=tmp_path / "scratch")


async def test_only_the_childs_own_commits_are_replayed_onto_the_new_base(stack, tmp_path):
    repo, parent, child = stack
    done = await _replay(repo, child, (parent,), tmp_path)
    assert done.outcome == "pushed" and done.head == repo.head("child") != child
    assert repo.own_commits("child") == ["child's change"]
    assert not repo.contains("child", parent)  # the parent's commit as it was is left behind
    assert repo.contains("child", repo.head("main"))


async def test_a_push_since_the_head_was_read_is_never_overwritten(stack, tmp_path):
    repo, parent, child = stack
    pushed = repo.commit("child", {"app/b.py": "B = 2\n"}, "someone's push", start="child")
    done = await _replay(repo, child, (parent,), tmp_path)  # the head the bot read: before that push
    assert done.outcome == "rejected"
    assert repo.head("child") == pushed


async def test_a_parent_landed_as_its_own_commits_leaves_the_child_as_it_is(tmp_path):
    repo = Repo(tmp_path)
    parent = repo.commit("parent", {"app/a.py": "A = 1\n"}, "parent's change")
    child = repo.commit("child", {"app/b.py": "B = 1\n"}, "child's change", start="parent")
    git(repo.work, "checkout", "--quiet", "main")
    git(repo.work, "merge", "--quiet", "--no-ff", "-m", "Merge #1", parent)
    git(repo.work, "push", "--quiet", "origin", "main")
    done = await _replay(repo, child, (parent,), tmp_path)
    assert done.outcome == "nothing" and repo.head("child") == child


async def test_a_recorded_fork_point_not_in_the_childs_history_is_passed_over(stack, tmp_path):
    repo, parent, child = stack
    elsewhere = repo.commit("other", {"app/c.py": "C = 1\n"}, "not the child's")
    done = await _replay(repo, child, (elsewhere, parent), tmp_path)
    assert done.outcome == "pushed" and done.fork_point == parent
    assert repo.own_commits("child") == ["child's change"]


async def test_a_replay_that_conflicts_pushes_nothing_and_names_the_files(stack, tmp_path):
    repo, parent, child = stack
    repo.commit("main", {"app/b.py": "B = 'main'\n"}, "main's own b")
    done = await _replay(repo, child, (parent,), tmp_path)
    assert (done.outcome, done.files) == ("conflict", ("app/b.py",))
    assert repo.head("child") == child
