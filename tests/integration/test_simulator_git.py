"""Branches are real git: a real clone + push moves the head the API reports, and merges
make real commits."""

from __future__ import annotations

import asyncio

import pytest

from tests.simulator_fixtures import WEBHOOK_SECRET, git

REPO = "acme/widgets"


@pytest.fixture
async def pr(sim):
    await sim.create_repo(REPO, files={"app.py": "one\ntwo\nthree\n"})
    return await sim.open_pr(REPO, title="Change two", head="fix", author="alice",
                             files={"app.py": "one\nTWO\nthree\n"})


async def _head_via_api(api, branch: str) -> str:
    resp = await api.get(f"repos/{REPO}/git/ref/heads/{branch}")
    assert resp.status_code == 200
    assert resp.json()["ref"] == f"refs/heads/{branch}"
    return resp.json()["object"]["sha"]


async def test_real_push_moves_head_and_sends_signed_synchronize(api, sim, pr, tmp_path,
                                                                webhook_receiver):
    sim.configure_webhooks(webhook_receiver.url, WEBHOOK_SECRET)
    before = await _head_via_api(api, "fix")
    clone_url = (await api.get(f"repos/{REPO}/pulls/{pr.number}")).json()["head"]["repo"]["clone_url"]

    work = tmp_path / "work"
    await git("clone", "--quiet", "--branch", "fix", clone_url, str(work))
    (work / "app.py").write_text("one\nTWO\nthree\nfour\n")
    await git("commit", "--quiet", "-am", "Add four", cwd=work)
    pushed = (await git("rev-parse", "HEAD", cwd=work)).strip()
    await git("push", "--quiet", "origin", "fix", cwd=work, env={"SIMULATOR_PUSHER": "fixer"})

    assert await _head_via_api(api, "fix") == pushed != before
    pull = (await api.get(f"repos/{REPO}/pulls/{pr.number}")).json()
    assert pull["head"]["sha"] == pushed

    [sync] = await webhook_receiver.wait_for("pull_request", "synchronize")
    assert sync.valid, "X-Hub-Signature-256 must verify with the shared secret"
    assert sync.signature.startswith("sha256=")
    assert sync.headers["user-agent"] == "GitHub-Hookshot/sim"
    assert sync.payload["before"] == before and sync.payload["after"] == pushed
    assert sync.payload["pull_request"]["head"]["sha"] == pushed
    assert sync.payload["sender"]["login"] == "fixer"
    [push] = await webhook_receiver.wait_for("push")  # the scenario-free repo had no earlier push
    assert push.payload["after"] == pushed and push.payload["commits"][-1]["message"] == "Add four"


async def test_head_is_read_from_git_even_when_no_hook_told_us(api, sim, pr, tmp_path):
    # A push whose post-receive notification is lost (hook failed, simulator restarted) must
    # still be what the API reports: heads are never served from a cached field.
    sim.git.set_hook_url(None)
    work = tmp_path / "quiet"
    await git("clone", "--quiet", "--branch", "fix", sim.repo(REPO).git_dir.as_uri(), str(work))
    (work / "app.py").write_text("changed quietly\n")
    await git("commit", "--quiet", "-am", "Quiet", cwd=work)
    await git("push", "--quiet", "origin", "fix", cwd=work)
    pushed = (await git("rev-parse", "HEAD", cwd=work)).strip()
    assert await _head_via_api(api, "fix") == pushed
    assert (await api.get(f"repos/{REPO}/pulls/{pr.number}")).json()["head"]["sha"] == pushed
    assert sim.webhooks.find("pull_request", "synchronize") == []


async def test_control_push_is_a_real_commit_on_the_branch(api, sim, pr, tmp_path):
    sha = await sim.push(REPO, "fix", {"notes.md": "hello\n", "app.py": None}, author="alice")
    assert await _head_via_api(api, "fix") == sha
    work = tmp_path / "check"
    await git("clone", "--quiet", "--branch", "fix", sim.repo(REPO).git_dir.as_uri(), str(work))
    assert (work / "notes.md").read_text() == "hello\n"
    assert not (work / "app.py").exists()
    assert (await git("log", "-1", "--format=%an", cwd=work)).strip() == "alice"


async def test_merge_with_stale_sha_is_409_and_leaves_base_alone(api, sim, pr):
    stale = await _head_via_api(api, "fix")
    await sim.push(REPO, "fix", {"app.py": "one\nTWO\n3\n"})
    base = await _head_via_api(api, "main")
    resp = await api.put(f"repos/{REPO}/pulls/{pr.number}/merge",
                         json={"sha": stale, "merge_method": "squash"})
    assert resp.status_code == 409
    assert resp.json()["message"].startswith("Head branch was modified")
    assert await _head_via_api(api, "main") == base
    assert (await api.get(f"repos/{REPO}/pulls/{pr.number}")).json()["state"] == "open"


@pytest.mark.parametrize("method, parents", [("squash", 1), ("merge", 2), ("rebase", 1)])
async def test_merge_makes_a_real_commit_on_base(api, sim, pr, tmp_path, method, parents):
    head = await _head_via_api(api, "fix")
    base = await _head_via_api(api, "main")
    resp = await api.put(f"repos/{REPO}/pulls/{pr.number}/merge",
                         json={"sha": head, "merge_method": method, "commit_title": "Ship it"})
    assert resp.status_code == 200
    assert resp.json()["merged"] is True
    merged = resp.json()["sha"]
    assert await _head_via_api(api, "main") == merged

    git_dir = sim.repo(REPO).git_dir
    listed = (await git("--git-dir", str(git_dir), "rev-list", "--parents", "-n1", merged)).split()
    assert listed[1] == base and len(listed) - 1 == parents
    tree = await git("--git-dir", str(git_dir), "show", f"{merged}:app.py")
    assert tree == "one\nTWO\nthree\n"

    pull = (await api.get(f"repos/{REPO}/pulls/{pr.number}")).json()
    assert (pull["state"], pull["merged"], pull["merge_commit_sha"]) == ("closed", True, merged)
    again = await api.put(f"repos/{REPO}/pulls/{pr.number}/merge", json={"merge_method": method})
    assert again.status_code == 405
    assert sim.effects("merge")[0]["sha"] == merged


@pytest.mark.parametrize("state", ["dirty", "blocked", "behind"])
async def test_merge_refused_while_not_mergeable(api, sim, pr, state):
    await sim.set_mergeable(REPO, pr.number, state)
    pull = (await api.get(f"repos/{REPO}/pulls/{pr.number}")).json()
    assert pull["mergeable_state"] == state
    assert pull["mergeable"] is (state != "dirty")
    resp = await api.put(f"repos/{REPO}/pulls/{pr.number}/merge", json={"merge_method": "squash"})
    assert resp.status_code == 405


async def test_real_conflict_refuses_merge_and_marks_dirty(api, sim, pr):
    await sim.push(REPO, "main", {"app.py": "one\nZWEI\nthree\n"})
    resp = await api.put(f"repos/{REPO}/pulls/{pr.number}/merge", json={"merge_method": "merge"})
    assert resp.status_code == 405
    assert (await api.get(f"repos/{REPO}/pulls/{pr.number}")).json()["mergeable_state"] == "dirty"


async def test_update_branch_merges_base_into_head(api, sim, pr):
    await sim.push(REPO, "main", {"other.txt": "new on main\n"})
    old_head = await _head_via_api(api, "fix")
    resp = await api.put(f"repos/{REPO}/pulls/{pr.number}/update-branch",
                         json={"expected_head_sha": old_head})
    assert resp.status_code == 202
    new_head = await _head_via_api(api, "fix")
    assert new_head != old_head
    content = await api.get(f"repos/{REPO}/contents/other.txt", params={"ref": "fix"})
    assert content.status_code == 200
    stale = await api.put(f"repos/{REPO}/pulls/{pr.number}/update-branch",
                          json={"expected_head_sha": old_head})
    assert stale.status_code == 422


async def test_concurrent_writes_all_land(api, sim, pr, tmp_path):
    # Each control push reads the branch and moves it by compare-and-set under the simulator's
    # lock; without the lock, racing pushes would fail or drop commits.
    shas = await asyncio.gather(*[sim.push(REPO, "fix", {f"f{i}.txt": str(i)}) for i in range(8)])
    posted = await asyncio.gather(*[api.post(f"repos/{REPO}/issues/{pr.number}/comments",
                                             json={"body": f"c{i}"}) for i in range(8)])
    assert len(set(shas)) == 8
    assert sorted(r.json()["id"] for r in posted) == sorted({r.json()["id"] for r in posted})
    work = tmp_path / "all"
    await git("clone", "--quiet", "--branch", "fix", sim.repo(REPO).git_dir.as_uri(), str(work))
    assert sorted(p.name for p in work.glob("f*.txt")) == [f"f{i}.txt" for i in range(8)]
    assert await _head_via_api(api, "fix") in shas
