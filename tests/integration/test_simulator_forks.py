"""A PR from a fork: its head branch lives in the fork's own git repository, and the REST shapes
say so (`head.repo`, `maintainer_can_modify`)."""

from __future__ import annotations

import base64

import pytest

from simulator.errors import ApiError
from tests.simulator_fixtures import WEBHOOK_SECRET, git

REPO = "acme/widgets"
FORK = "dev/widgets"


@pytest.fixture
async def fork_pr(sim):
    await sim.create_repo(REPO, files={"app.py": "one\n"})
    # The base has a branch of the same name as the fork's: the PR's head is never read there.
    await sim.push(REPO, "fix", {"app.py": "base's own fix\n"})
    await sim.fork_repo(REPO, "dev")
    return await sim.open_pr(REPO, title="From a fork", head="fix", author="dev", head_repo=FORK,
                             files={"app.py": "two\n"}, maintainer_can_modify=True)


async def _ref(api, repo: str, branch: str) -> str:
    resp = await api.get(f"repos/{repo}/git/ref/heads/{branch}")
    assert resp.status_code == 200
    return resp.json()["object"]["sha"]


async def test_the_pr_object_names_the_fork_as_its_head(api, sim, fork_pr):
    pull = (await api.get(f"repos/{REPO}/pulls/{fork_pr.number}")).json()
    assert pull["head"]["repo"]["full_name"] == FORK and pull["head"]["repo"]["fork"] is True
    assert pull["head"]["label"] == "dev:fix" and pull["head"]["user"]["login"] == "dev"
    assert pull["base"]["repo"]["full_name"] == REPO and pull["base"]["repo"]["fork"] is False
    assert pull["maintainer_can_modify"] is True
    assert pull["head"]["repo"]["clone_url"] == sim.repo(FORK).git_dir.as_uri()
    assert pull["head"]["sha"] == await _ref(api, FORK, "fix") != await _ref(api, REPO, "fix")
    listed = (await api.get(f"repos/{REPO}/pulls", params={"head": "dev:fix"})).json()
    assert [p["number"] for p in listed] == [fork_pr.number]
    assert (await api.get(f"repos/{REPO}/pulls", params={"head": "acme:fix"})).json() == []


async def test_a_real_push_to_the_fork_moves_the_pr_and_sends_synchronize_from_the_base(
        api, sim, fork_pr, tmp_path, webhook_receiver):
    sim.configure_webhooks(webhook_receiver.url, WEBHOOK_SECRET)
    clone_url = (await api.get(f"repos/{REPO}/pulls/{fork_pr.number}")).json()["head"]["repo"]["clone_url"]
    work = tmp_path / "work"
    await git("clone", "--quiet", "--branch", "fix", clone_url, str(work))
    (work / "app.py").write_text("three\n")
    await git("commit", "--quiet", "-am", "Three", cwd=work)
    pushed = (await git("rev-parse", "HEAD", cwd=work)).strip()
    base_fix = await _ref(api, REPO, "fix")
    await git("push", "--quiet", "origin", "fix", cwd=work)

    assert await _ref(api, FORK, "fix") == pushed
    assert await _ref(api, REPO, "fix") == base_fix  # the base's branch of that name is untouched
    assert (await api.get(f"repos/{REPO}/pulls/{fork_pr.number}")).json()["head"]["sha"] == pushed
    [sync] = await webhook_receiver.wait_for("pull_request", "synchronize")
    assert sync.payload["repository"]["full_name"] == REPO and sync.payload["after"] == pushed
    [push] = await webhook_receiver.wait_for("push")
    assert push.payload["repository"]["full_name"] == FORK


async def test_a_fork_pr_is_reviewed_and_merged_from_the_base(api, sim, fork_pr):
    review = await sim.submit_review(REPO, fork_pr.number, user="maint", body="ok", state="APPROVED",
                                     threads=[{"path": "app.py", "line": 1, "body": "fine"}])
    assert review.commit_id == await _ref(api, FORK, "fix")
    await sim.push(REPO, "main", {"other.py": "x\n"})  # behind: the branch is updated in the fork
    new_head = await sim.update_branch(REPO, fork_pr.number)
    assert await _ref(api, FORK, "fix") == new_head
    result = await sim.merge_pr(REPO, fork_pr.number, sha=new_head)
    assert result["merged"] is True
    merged = (await api.get(f"repos/{REPO}/contents/app.py")).json()
    assert base64.b64decode(merged["content"]) == b"two\n"  # the fork's commit, now on main


async def test_a_fork_its_author_keeps_to_themselves_is_not_updated(sim):
    await sim.create_repo(REPO, files={"app.py": "one\n"})
    await sim.fork_repo(REPO, "dev")
    pr = await sim.open_pr(REPO, title="Closed fork", head="fix", author="dev", head_repo=FORK,
                           files={"app.py": "two\n"})
    await sim.push(REPO, "main", {"other.py": "x\n"})
    with pytest.raises(ApiError):
        await sim.update_branch(REPO, pr.number)


async def test_control_api_forks_and_opens_a_pr_from_the_fork(api, sim):
    await api.post("_sim/repos", json={"name": REPO, "files": {"a.py": "1\n"}})
    fork = (await api.post(f"_sim/repos/{REPO}/forks", json={"owner": "dev"})).json()
    assert fork["full_name"] == FORK and fork["fork_of"] == REPO
    resp = await api.post(f"_sim/repos/{REPO}/pulls", json={
        "title": "t", "head": "fix", "author": "dev", "head_repo": FORK, "files": {"a.py": "2\n"}})
    assert resp.status_code == 201
    pull = resp.json()
    assert pull["head"]["repo"]["full_name"] == FORK and pull["maintainer_can_modify"] is False
    await sim.create_repo("other/widgets")
    refused = await api.post(f"_sim/repos/{REPO}/pulls", json={
        "title": "t", "head": "main", "author": "x", "head_repo": "other/widgets"})
    assert refused.status_code == 422
