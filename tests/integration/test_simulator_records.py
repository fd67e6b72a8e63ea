"""What a chaos test counts afterwards: forced (non-fast-forward) pushes and duplicate writes."""

from __future__ import annotations

import asyncio

import pytest

from tests.simulator_fixtures import git

REPO = "acme/widgets"
MARKER = "<!-- convergebot:reply:PRRT_x -->"


@pytest.fixture
async def pr(sim):
    await sim.create_repo(REPO, files={"app.py": "one\n"})
    return await sim.open_pr(REPO, title="T", head="fix", files={"app.py": "two\n"},
                             author="alice")


async def _until(condition, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.02)


async def test_force_push_is_flagged_and_fast_forward_is_not(api, sim, pr, tmp_path):
    work = tmp_path / "work"
    await git("clone", "--quiet", "--branch", "fix", sim.repo(REPO).git_dir.as_uri(), str(work))
    (work / "app.py").write_text("three\n")
    await git("commit", "--quiet", "-am", "three", cwd=work)
    await git("push", "--quiet", "origin", "fix", cwd=work, env={"SIMULATOR_PUSHER": "fixer"})
    await _until(lambda: [u["via"] for u in sim.ref_updates].count("git") == 1)
    (work / "app.py").write_text("three, amended\n")
    await git("commit", "--quiet", "--amend", "-am", "three again", cwd=work)
    await git("push", "--quiet", "--force", "origin", "fix", cwd=work,
              env={"SIMULATOR_PUSHER": "fixer"})
    await _until(lambda: [u["via"] for u in sim.ref_updates].count("git") == 2)

    fast, forced = [u for u in sim.ref_updates if u["via"] == "git"]
    assert not fast["forced"] and forced["forced"]
    assert forced["old"] == fast["new"] and forced["pusher"] == "fixer"
    assert forced["ref"] == "refs/heads/fix" and forced["repo"] == REPO
    assert sim.forced_pushes() == [forced]
    assert (await api.get("_sim/ref-updates", params={"forced": "1"})).json() == [forced]
    assert (await api.get("_sim/state")).json()["ref_updates"][-1] == forced


async def test_control_pushes_merges_and_branch_updates_are_fast_forwards(sim, pr):
    await sim.push(REPO, "main", {"other.py": "x\n"})
    await sim.update_branch(REPO, pr.number)
    await sim.merge_pr(REPO, pr.number)
    assert {u["via"] for u in sim.ref_updates} == {"control", "update_branch", "merge"}
    assert sim.forced_pushes() == []
    created = sim.ref_updates[0]  # open_pr created the head branch
    assert created["created"] and created["ref"] == "refs/heads/fix"


async def _post(api, number: int, body: str):
    resp = await api.post(f"repos/{REPO}/issues/{number}/comments", json={"body": body})
    assert resp.status_code == 201
    return resp.json()


async def test_duplicate_effects_finds_a_marker_posted_twice_on_one_pr(api, sim, pr):
    other = await sim.open_pr(REPO, title="U", head="other", files={"b.py": "b\n"})
    first = await _post(api, pr.number, f"done\n\n{MARKER}")
    again = await _post(api, pr.number, f"done (retry)\n\n{MARKER}")
    await _post(api, other.number, f"done\n\n{MARKER}")  # the same marker on another PR is fine
    await _post(api, pr.number, "no marker")
    await _post(api, pr.number, "no marker")  # unmarked comments are not judged
    [dup] = sim.duplicate_effects()
    assert dup == {"kind": "issue_comment", "repo": REPO, "number": pr.number,
                   "actor": "convergebot[bot]", "marker": "convergebot:reply:PRRT_x",
                   "count": 2, "ids": [first["id"], again["id"]]}
    assert (await api.get("_sim/duplicates")).json() == [dup]


async def test_a_retried_lost_ack_shows_up_as_a_duplicate(api, sim, pr):
    sim.chaos(1, lost_ack_rate=1.0)
    body = {"body": f"hi\n\n{MARKER}"}
    lost = await api.post(f"repos/{REPO}/issues/{pr.number}/comments", json=body)
    assert lost.status_code == 502
    sim.chaos_off()
    await _post(api, pr.number, body["body"])  # a naive retry
    assert [d["count"] for d in sim.duplicate_effects()] == [2]


async def test_duplicate_replies_and_check_runs_are_found(api, sim, pr):
    await sim.submit_review(REPO, pr.number, user="carol",
                            threads=[{"path": "app.py", "line": 1, "body": "a"},
                                     {"path": "app.py", "line": 1, "body": "b"}])
    first, second = (sim.state.threads[t].comment_ids[0] for t in pr.thread_ids)
    replies = f"repos/{REPO}/pulls/{pr.number}/comments"
    for target in (first, first, second):  # twice in one thread, once in the other
        resp = await api.post(f"{replies}/{target}/replies", json={"body": f"ok {MARKER}"})
        assert resp.status_code == 201
    head = (await api.get(f"repos/{REPO}/pulls/{pr.number}")).json()["head"]["sha"]
    for name in ("convergebot", "convergebot", "other"):
        run = {"name": name, "head_sha": head, "status": "in_progress"}
        assert (await api.post(f"repos/{REPO}/check-runs", json=run)).status_code == 201
    found = {d["kind"]: d for d in sim.duplicate_effects()}
    assert set(found) == {"review_reply", "check_run_created"}
    assert found["review_reply"]["thread"] == sim.state.threads[pr.thread_ids[0]].node_id
    assert found["review_reply"]["count"] == 2
    assert found["check_run_created"]["name"] == "convergebot"
    assert found["check_run_created"]["head_sha"] == head
    assert found["check_run_created"]["count"] == 2
