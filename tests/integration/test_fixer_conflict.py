"""Conflict and CI rounds on the simulator's real repositories: the workspace brings the base
branch in as `origin/<base>`, and a fixer's merge turns a `dirty` PR into one GitHub merges."""

from __future__ import annotations

import json

import pytest

from bot.fixers.base import FixRequest
from bot.fixers.command import CommandFixer
from bot.fixers.environment import GitIdentity
from bot.fixers.scripted import ScriptedFixer
from bot.fixers.workspace import Workspace
from bot.rules.model import Finding
from tests.simulator_fixtures import git

from .test_fixer_support import fixer_script

REPO = "acme/widgets"


@pytest.fixture
async def pr(sim):
    await sim.create_repo(REPO, files={"app.py": "one\ntwo\nthree\n", "docs.md": "# Docs\n",
                                       "old.txt": "bye\n"})
    return await sim.open_pr(REPO, title="Change two", head="fix", author="alice",
                             files={"app.py": "one\nTWO\nthree\n"})


async def pull(api, number: int) -> dict:
    return (await api.get(f"repos/{REPO}/pulls/{number}")).json()


async def conflict_request(sim, pr, **overrides) -> FixRequest:
    repo = sim.repo(REPO)
    fields = dict(
        pr_key=f"{REPO}#{pr.number}", round_no=4, attempt=0, title=pr.title, description="",
        head_branch=pr.head_ref, entry_head=await sim.head_sha(repo, pr),
        clone_url=repo.git_dir.as_uri(), token=None,
        findings=(Finding(None, None, "app.py", None, "app.py conflicts with main", None,
                          "conflict:app.py"),),
        instructions=(), kind="conflict", base_branch="main")
    fields.update(overrides)
    return FixRequest(**fields)


async def show(sim, rev: str, path: str) -> str:
    return await sim.git.run(sim.repo(REPO).git_dir, "show", f"{rev}:{path}")


async def test_a_conflict_rounds_clone_holds_the_base_branch_as_origin(sim, pr, tmp_path):
    await sim.push(REPO, "main", {"app.py": "one\n2\nthree\n"})
    main = await sim.git.branch_sha(sim.repo(REPO).git_dir, "main")
    identity = GitIdentity("t", "t@example.invalid")

    async def remote_refs(req: FixRequest) -> list[str]:
        async with Workspace.open(req, identity=identity, git_timeout=30,
                                  workdir_root=tmp_path / "work") as ws:
            refs = await ws.local.run("for-each-ref", "--format=%(refname) %(objectname)",
                                      "refs/remotes", cwd=ws.repo)
            return sorted(refs.splitlines())

    conflict = await conflict_request(sim, pr)
    assert f"refs/remotes/origin/main {main}" in await remote_refs(conflict)
    for other in ("review", "ci"):  # only a conflict round asks for the base
        refs = await remote_refs(await conflict_request(sim, pr, kind=other))
        assert [r.split()[0] for r in refs] == ["refs/remotes/origin/fix"]


async def test_the_scripted_fixer_merges_the_base_and_the_pr_becomes_mergeable(api, sim, pr):
    await sim.push(REPO, "main", {"app.py": "one\n2\nthree\n", "docs.md": "# The docs\n"})
    before = await pull(api, pr.number)
    assert (before["mergeable"], before["mergeable_state"]) == (False, "dirty")
    req = await conflict_request(sim, pr)
    main = await sim.git.branch_sha(sim.repo(REPO).git_dir, "main")

    verdict = await ScriptedFixer(["push"]).run(req)

    assert verdict.finished and verdict.pushed_head
    assert verdict.summary == "fake fixer: merged origin/main"
    after = await pull(api, pr.number)
    assert after["head"]["sha"] == verdict.pushed_head
    assert (after["mergeable"], after["mergeable_state"]) == (True, "clean")
    info = await sim.git.commit_info(sim.repo(REPO).git_dir, verdict.pushed_head)
    assert info.parents == [req.entry_head, main]  # a merge on top: the reviewed commits stay
    assert info.message.startswith("Merge origin/main into fix")
    merged = await api.put(f"repos/{REPO}/pulls/{pr.number}/merge",
                           json={"sha": verdict.pushed_head, "merge_method": "squash"})
    assert merged.status_code == 200, merged.text
    assert await show(sim, "main", "app.py") == "one\nTWO\nthree\n"  # the branch's side
    assert await show(sim, "main", "docs.md") == "# The docs\n"  # the base's change kept


async def test_a_file_the_branch_deleted_and_the_base_changed_is_settled_too(api, sim, pr):
    await sim.push(REPO, "fix", {"old.txt": None}, author="alice")
    await sim.push(REPO, "main", {"old.txt": "still here\n"})
    assert (await pull(api, pr.number))["mergeable_state"] == "dirty"

    verdict = await ScriptedFixer(["push"]).run(await conflict_request(sim, pr))

    assert verdict.pushed_head and "old.txt" in verdict.summary
    assert (await pull(api, pr.number))["mergeable_state"] == "clean"
    listed = await sim.git.run(sim.repo(REPO).git_dir, "ls-tree", "--name-only",
                               verdict.pushed_head)
    assert "old.txt" not in listed.split()


async def test_a_ci_round_appends_to_the_named_files_as_a_review_round_does(api, sim, pr):
    finding = Finding(None, None, "app.py", None, "check `tests` failed", None, "ci:tests")
    req = await conflict_request(sim, pr, kind="ci", findings=(finding,))

    verdict = await ScriptedFixer(["push"]).run(req)

    info = await sim.git.commit_info(sim.repo(REPO).git_dir, verdict.pushed_head)
    assert info.parents == [req.entry_head]
    assert info.message == "convergebot: fix failing checks (round 4)"
    assert (await show(sim, verdict.pushed_head, "app.py")).endswith(
        "convergebot fake fix: ci:tests (round 4)\n")


async def test_a_base_branch_name_that_reads_as_an_option_is_refused(sim, pr):
    verdict = await ScriptedFixer(["push"]).run(
        await conflict_request(sim, pr, base_branch="--upload-pack=touch /tmp/x"))
    assert verdict.finished is False and "refusing base branch name" in (verdict.detail or "")


MERGES = """
record(kind=doc["kind"], base=doc["base_branch"],
       prompt=pathlib.Path(os.environ["CONVERGEBOT_PROMPT_FILE"]).read_text())
sh("git", "merge", "--no-edit", "-X", "theirs", "origin/" + doc["base_branch"])
verdict()
"""


async def test_a_command_fixer_merges_origin_base_and_the_bot_pushes_the_merge(api, sim, pr,
                                                                               tmp_path):
    await sim.push(REPO, "main", {"app.py": "one\n2\nthree\n"})
    argv, record = fixer_script(tmp_path, MERGES)
    fixer = CommandFixer(argv, 30, workdir_root=tmp_path / "work")

    verdict = await fixer.run(await conflict_request(sim, pr))

    seen = json.loads(record.read_text())
    assert (seen["kind"], seen["base"]) == ("conflict", "main")
    assert "git merge origin/main" in seen["prompt"] and "not by rebasing" in seen["prompt"]
    assert verdict.pushed_head == (await pull(api, pr.number))["head"]["sha"]
    assert (await pull(api, pr.number))["mergeable_state"] == "clean"
    assert await show(sim, verdict.pushed_head, "app.py") == "one\n2\nthree\n"  # theirs, asked
    work = tmp_path / "check"
    await git("clone", "--quiet", "--branch", "fix", sim.repo(REPO).git_dir.as_uri(), str(work))
    assert (await git("log", "--format=%s", "-1", cwd=work)).strip().startswith("Merge")


async def test_a_fork_prs_conflict_round_fetches_the_base_from_the_base_repository(sim, tmp_path):
    await sim.create_repo(REPO, files={"app.py": "one\ntwo\nthree\n"})
    fork = await sim.fork_repo(REPO, "alice")
    pr = await sim.open_pr(REPO, title="Change two", head="fix", author="alice", head_repo=fork.full_name,
                           files={"app.py": "one\nTWO\nthree\n"})
    await sim.push(REPO, "main", {"app.py": "one\n2\nthree\n"})  # the fork's main stays behind
    base_main = await sim.git.branch_sha(sim.repo(REPO).git_dir, "main")
    fork_main = await sim.git.branch_sha(fork.git_dir, "main")
    assert base_main != fork_main
    req = await conflict_request(sim, pr, clone_url=fork.git_dir.as_uri(),
                                 base_clone_url=sim.repo(REPO).git_dir.as_uri())
    async with Workspace.open(req, identity=GitIdentity("t", "t@example.invalid"), git_timeout=30,
                              workdir_root=tmp_path / "work") as ws:
        got = (await ws.local.run("rev-parse", "refs/remotes/origin/main", cwd=ws.repo)).strip()
    assert got == base_main
