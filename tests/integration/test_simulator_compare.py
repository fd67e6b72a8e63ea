"""GET .../compare/{base}...{head} from real git, and the client's conflicting_files over it."""

from __future__ import annotations

import pytest

from bot.github.client import GitHubClient, open_github
from tests.simulator_fixtures import git

REPO = "acme/widgets"
FILES = {"app.py": "one\ntwo\nthree\n", "docs.md": "# Docs\n", "old.txt": "bye\n",
         "lib/util.py": "X = 1\n"}


@pytest.fixture
async def pr(sim):
    await sim.create_repo(REPO, files=FILES)
    return await sim.open_pr(REPO, title="Change", head="fix", author="alice",
                             files={"app.py": "one\nTWO\nthree\n", "new.txt": "hi\n",
                                    "old.txt": None})


@pytest.fixture
async def client(simulator):
    async with open_github(api_url=simulator.url, token="t", timeout=5, read_timeout=5) as gh:
        yield GitHubClient(gh, max_concurrency=4, call_timeout=10)


async def compare(api, basehead: str) -> dict:
    resp = await api.get(f"repos/{REPO}/compare/{basehead}")
    assert resp.status_code == 200, resp.text
    return resp.json()


async def test_a_branch_ahead_of_its_base_lists_its_commits_and_files(api, sim, pr):
    found = await compare(api, "main...fix")
    head = await sim.head_sha(sim.repo(REPO), pr)
    main = await sim.git.branch_sha(sim.repo(REPO).git_dir, "main")
    assert (found["status"], found["ahead_by"], found["behind_by"], found["total_commits"]) == (
        "ahead", 1, 0, 1)
    assert found["merge_base_commit"]["sha"] == found["base_commit"]["sha"] == main
    assert [c["sha"] for c in found["commits"]] == [head]
    assert [(f["filename"], f["status"], f["additions"], f["deletions"], f["changes"])
            for f in found["files"]] == [("app.py", "modified", 1, 1, 2),
                                         ("new.txt", "added", 1, 0, 1),
                                         ("old.txt", "removed", 0, 1, 1)]


async def test_diverged_branches_list_only_the_heads_side_from_the_merge_base(api, sim, pr):
    parted = await sim.git.branch_sha(sim.repo(REPO).git_dir, "main")
    await sim.push(REPO, "main", {"docs.md": "# The docs\n"})
    await sim.push(REPO, "main", {"lib/util.py": "X = 2\n"})
    found = await compare(api, "main...fix")
    assert (found["status"], found["ahead_by"], found["behind_by"]) == ("diverged", 1, 2)
    assert found["merge_base_commit"]["sha"] == parted != found["base_commit"]["sha"]
    assert [f["filename"] for f in found["files"]] == ["app.py", "new.txt", "old.txt"]

    back = await compare(api, "fix...main")
    assert (back["status"], back["ahead_by"], back["behind_by"]) == ("diverged", 2, 1)
    assert [f["filename"] for f in back["files"]] == ["docs.md", "lib/util.py"]


async def test_shas_and_branch_names_with_slashes_are_both_refs(api, sim, pr):
    repo = sim.repo(REPO)
    main = await sim.git.branch_sha(repo.git_dir, "main")
    await sim.push(REPO, "feature/deep", {"lib/util.py": "X = 3\n"})
    found = await compare(api, f"{main}...feature/deep")
    assert found["status"] == "ahead" and [f["filename"] for f in found["files"]] == ["lib/util.py"]
    assert (await compare(api, "main...main"))["status"] == "identical"
    assert (await compare(api, "fix...main"))["status"] == "behind"


@pytest.mark.parametrize("basehead", ["main..fix", "main...nope", "nope...fix", "...fix"])
async def test_an_unknown_ref_or_a_malformed_basehead_is_404(api, pr, basehead):
    assert (await api.get(f"repos/{REPO}/compare/{basehead}")).status_code == 404


async def test_conflicting_files_are_those_both_sides_changed(client, sim, pr):
    await sim.push(REPO, "main", {"app.py": "one\n2\nthree\n", "docs.md": "# The docs\n"})
    await sim.push(REPO, "fix", {"lib/util.py": "X = 9\n"}, author="alice")
    await sim.push(REPO, "main", {"lib/util.py": "X = 2\n", "old.txt": "still here\n"})
    head = await sim.head_sha(sim.repo(REPO), pr)

    files = await client.conflicting_files("acme", "widgets", "main", head)
    assert files == ["app.py", "lib/util.py", "old.txt"]  # sorted; docs.md only moved on main


async def test_conflicting_files_are_empty_when_the_base_did_not_move(client, sim, pr):
    head = await sim.head_sha(sim.repo(REPO), pr)
    assert await client.conflicting_files("acme", "widgets", "main", head) == []


async def test_asking_again_about_unchanged_branches_costs_no_rate_limit(client, sim, pr):
    await sim.push(REPO, "main", {"app.py": "one\n2\nthree\n"})
    head = await sim.head_sha(sim.repo(REPO), pr)
    first = await client.conflicting_files("acme", "widgets", "main", head)
    with client.tracking_reads() as reads:
        again = await client.conflicting_files("acme", "widgets", "main", head)
    assert first == again == ["app.py"]
    assert (reads.reads, reads.unchanged) == (2, 2)


async def test_conflicting_files_names_what_a_real_merge_conflicts_on(client, sim, pr, tmp_path):
    """The approximation holds where it matters: every file git reports in conflict is named."""
    await sim.push(REPO, "main", {"app.py": "one\n2\nthree\n", "lib/util.py": "X = 2\n"})
    await sim.push(REPO, "fix", {"lib/util.py": "X = 9\n"}, author="alice")
    work = tmp_path / "work"
    await git("clone", "--quiet", "--branch", "fix", sim.repo(REPO).git_dir.as_uri(), str(work))
    with pytest.raises(RuntimeError):
        await git("merge", "--no-edit", "origin/main", cwd=work)
    conflicted = (await git("diff", "--name-only", "--diff-filter=U", cwd=work)).split()
    head = await sim.head_sha(sim.repo(REPO), pr)
    named = await client.conflicting_files("acme", "widgets", "main", head)
    assert sorted(conflicted) == ["app.py", "lib/util.py"]
    assert set(conflicted) <= set(named)
