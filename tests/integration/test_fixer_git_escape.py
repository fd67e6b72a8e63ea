"""What an agent writes in its clone's git directory never runs, or steers, the bot's own git.

After the agent exits the bot commits what it left and pushes with the token. Each agent here
changes a file and plants something git would act on: a program (`core.fsmonitor`, a clean
filter, a config reached through `include.path`, a config file that is a link, a `.git` that is
a gitfile or a link) that copies a secret the sandbox hides to a marker outside the clone, or a
rewrite of the remote's URL towards a trap. The planted program must never run, the push must go
to the real remote only, and the run either pushes the agent's change or refuses, saying why.
"""

from __future__ import annotations

import shutil
import sys
import textwrap
from pathlib import Path

import pytest

from bot.fixers.command import CommandFixer
from bot.fixers.git import GitError
from bot.fixers.gitdir import reclaim
from bot.fixers.sandbox import sandbox_for

from .test_fixer_sandbox import needs_bwrap
from .test_fixer_support import Remote, git, make_remote, make_request

AGENT = textwrap.dedent('''
    import json, os, pathlib, shutil, subprocess, sys
    case, planted, shared, trap, origin = sys.argv[1:6]
    shared = pathlib.Path(shared)

    def config(*args, file=None):
        where = ["--file", str(file)] if file else []
        subprocess.run(["git", "config", *where, *args], check=True)

    pathlib.Path("AGENT.md").write_text("the agent's change\\n")
    if case == "fsmonitor":
        config("core.fsmonitor", planted)
    elif case == "filter":
        config("filter.x.clean", planted)
        config("filter.x.required", "true")
        pathlib.Path(".gitattributes").write_text("*.md filter=x\\n")
    elif case == "url":
        config("url.%s.insteadOf" % trap, origin)
        config("url.%s.pushInsteadOf" % trap, origin)
        config("remote.origin.pushurl", trap)
        config("credential.helper", "!" + planted)
        config("core.sshCommand", planted)
    elif case == "include":
        config("core.fsmonitor", planted, file=shared / "included.cfg")
        config("include.path", str(shared / "included.cfg"))
    elif case == "config-link":
        shutil.copy(".git/config", shared / "planted.cfg")
        config("core.fsmonitor", planted, file=shared / "planted.cfg")
        os.remove(".git/config")
        os.symlink(shared / "planted.cfg", ".git/config")
    elif case in ("gitfile", "git-link"):
        moved = shared / "moved.git"
        shutil.move(".git", moved)
        config("core.fsmonitor", planted, file=moved / "config")
        if case == "gitfile":
            pathlib.Path(".git").write_text("gitdir: %s\\n" % moved)
        else:
            os.symlink(moved, ".git")
    print(json.dumps({"status": "addressed", "summary": case}))
''')
CASES = ("fsmonitor", "filter", "url", "include", "config-link", "gitfile", "git-link")
REFUSED = ("gitfile", "git-link")  # the clone is no longer one the bot can name: nothing is pushed


@pytest.fixture
def remote(tmp_path) -> Remote:
    return make_remote(tmp_path / "remote")


def _refs(bare: Path) -> str:
    return git("for-each-ref", cwd=bare)


@pytest.mark.parametrize("mode", [pytest.param("bwrap", marks=needs_bwrap), "off"])
@pytest.mark.parametrize("case", CASES)
async def test_nothing_the_agent_plants_in_the_git_directory_runs_or_redirects_the_push(
    tmp_path, remote, case, mode
):
    secret = tmp_path / "secret.txt"
    secret.write_text("the bot's secret\n")
    marker = tmp_path / "marker"  # outside the clone; the planted program would write it
    planted = f"sh -c 'cat {secret} > {marker}; echo ran >> {marker}'"
    shared = tmp_path / "shared"  # outside the clone, writable by the agent by design
    shared.mkdir()
    trap = tmp_path / "trap.git"
    git("init", "-q", "--bare", str(trap), cwd=tmp_path)
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    fixer = CommandFixer(
        [sys.executable, str(script), case, planted, str(shared), trap.as_uri(), remote.url], 30,
        workdir_root=tmp_path / "work",
        sandbox=sandbox_for(mode, hide=[secret], write=[shared]),
    )

    verdict = await fixer.run(make_request(remote))

    assert not marker.exists(), marker.read_text()
    assert _refs(trap) == ""
    if case in REFUSED:
        assert not verdict.finished and verdict.pushed_head is None
        assert "replaced the clone's .git directory" in (verdict.detail or "")
        assert remote.head() == remote.entry_head
        return
    assert verdict.finished and verdict.detail is None, verdict
    assert verdict.pushed_head == remote.head() != remote.entry_head
    assert remote.show(remote.head(), "AGENT.md") == "the agent's change"
    if case == "config-link":  # the bot replaced the link; it never wrote through it
        assert "fsmonitor" in (shared / "planted.cfg").read_text()


@pytest.mark.parametrize("mode", [pytest.param("bwrap", marks=needs_bwrap), "off"])
async def test_hooks_attributes_and_alternates_the_agent_adds_are_removed_before_the_commit(
    tmp_path, remote, mode
):
    marker = tmp_path / "marker"
    script = tmp_path / "agent.py"
    script.write_text(textwrap.dedent(f'''
        import json, os, pathlib
        git = pathlib.Path(".git")
        hook = "#!/bin/sh\\necho ran >> {marker}\\n"
        for name in ("pre-commit", "commit-msg", "post-commit", "reference-transaction"):
            (git / "hooks" / name).write_text(hook)
            os.chmod(git / "hooks" / name, 0o755)
        (git / "info" / "attributes").write_text("*.md filter=x\\n")
        (git / "objects" / "info" / "alternates").write_text("/nonexistent/objects\\n")
        (git / "commondir").write_text("/nonexistent\\n")
        pathlib.Path("AGENT.md").write_text("the agent's change\\n")
        print(json.dumps({{"status": "addressed"}}))
    '''))
    fixer = CommandFixer([sys.executable, str(script)], 30, workdir_root=tmp_path / "work",
                         sandbox=sandbox_for(mode))

    verdict = await fixer.run(make_request(remote))

    assert not marker.exists()
    assert verdict.finished and verdict.pushed_head == remote.head() != remote.entry_head, verdict
    assert remote.show(remote.head(), "AGENT.md") == "the agent's change"


def test_taking_the_git_directory_back_removes_links_and_never_follows_them(tmp_path):
    repo = tmp_path / "repo"
    git("init", "-q", str(repo), cwd=tmp_path)
    saved = (repo / ".git" / "config").read_bytes()
    outside = tmp_path / "outside"
    (outside / "hooks").mkdir(parents=True)
    (outside / "hooks" / "pre-commit").write_text("keep me")
    (outside / "attributes").write_text("keep me")
    (outside / "config").write_text("keep me")
    dot_git = repo / ".git"
    shutil.rmtree(dot_git / "hooks")
    (dot_git / "hooks").symlink_to(outside / "hooks")
    shutil.rmtree(dot_git / "info")
    (dot_git / "info").symlink_to(outside)
    (dot_git / "config").unlink()
    (dot_git / "config").symlink_to(outside / "config")

    reclaim(repo, saved)

    assert (dot_git / "config").read_bytes() == saved and not (dot_git / "config").is_symlink()
    assert not (dot_git / "hooks").exists() and not (dot_git / "info").exists()
    assert [p.read_text() for p in (outside / "hooks" / "pre-commit", outside / "attributes",
                                   outside / "config")] == ["keep me"] * 3


def test_a_git_directory_turned_into_a_file_is_refused(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / ".git").write_text(f"gitdir: {tmp_path / 'elsewhere'}\n")
    with pytest.raises(GitError, match="replaced the clone's .git directory"):
        reclaim(repo, b"")
