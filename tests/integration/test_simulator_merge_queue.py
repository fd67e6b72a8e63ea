"""The simulator's merge queue: GitHub's shapes for the setting, the enqueue mutation, the merge
group and its webhooks, and what the queue's checks do to the branch and the PR."""

from __future__ import annotations

import pytest

REPO = "acme/widgets"
QUEUE_QUERY = """
query($owner: String!, $name: String!, $number: Int!) {
  repository(owner: $owner, name: $name) {
    pullRequest(number: $number) {
      id state isMergeQueueEnabled isInMergeQueue
      mergeQueueEntry { id state position headCommit { oid } baseCommit { oid } pullRequest { number } }
    }
  }
}
"""
ENQUEUE = """
mutation($id: ID!, $head: GitObjectID) {
  enqueuePullRequest(input: {pullRequestId: $id, expectedHeadOid: $head}) {
    mergeQueueEntry { id state position headCommit { oid } }
  }
}
"""


@pytest.fixture
async def prs(sim):
    await sim.create_repo(REPO, files={"a.py": "a = 1\n", "b.py": "b = 1\n"})
    one = await sim.open_pr(REPO, title="One", head="one", files={"a.py": "a = 2\n"}, author="alice")
    two = await sim.open_pr(REPO, title="Two", head="two", files={"b.py": "b = 2\n"}, author="bob")
    return one, two


async def graphql(api, query: str, **variables) -> dict:
    resp = await api.post("graphql", json={"query": query, "variables": variables})
    assert resp.status_code == 200
    return resp.json()


async def queue_state(api, number: int) -> dict:
    data = await graphql(api, QUEUE_QUERY, owner="acme", name="widgets", number=number)
    return data["data"]["repository"]["pullRequest"]


async def enqueue(api, number: int, head: str | None = None) -> dict:
    pr = await queue_state(api, number)
    return await graphql(api, ENQUEUE, id=pr["id"], head=head)


def groups(sim, action: str | None = None) -> list[dict]:
    return [d.payload for d in sim.deliveries
            if d.event == "merge_group" and (action is None or d.action == action)]


def dequeued(sim) -> list[tuple[int, str]]:
    return [(d.payload["number"], d.payload["reason"]) for d in sim.deliveries
            if d.event == "pull_request" and d.action == "dequeued"]


async def test_a_queue_branch_refuses_the_rest_merge_with_github_s_message(api, sim, prs):
    one, _ = prs
    resp = await api.put("_sim/repos/acme/widgets/merge-queue", json={"checks": ["ci"]})
    assert resp.json() == {"required": True, "branch": "main", "checks": ["ci"], "entries": []}
    resp = await api.put(f"repos/{REPO}/pulls/{one.number}/merge", json={})
    assert resp.status_code == 405
    assert resp.json()["message"] == "Changes must be made through the merge queue"
    assert sim.effects("merge") == []
    state = await queue_state(api, one.number)
    assert (state["isMergeQueueEnabled"], state["isInMergeQueue"], state["mergeQueueEntry"]) == (True, False, None)
    await api.put("_sim/repos/acme/widgets/merge-queue", json={"required": False})
    assert (await queue_state(api, one.number))["isMergeQueueEnabled"] is False


async def test_enqueue_builds_the_merge_group_and_passing_checks_merge_it(api, sim, prs):
    one, _ = prs
    await sim.require_merge_queue(REPO, checks=["ci", "lint"])
    repo = sim.repo(REPO)
    base = await sim.git.branch_sha(repo.git_dir, "main")
    head = await sim.head_sha(*sim.pr(REPO, one.number))

    entry = (await enqueue(api, one.number, head))["data"]["enqueuePullRequest"]["mergeQueueEntry"]
    assert (entry["state"], entry["position"]) == ("AWAITING_CHECKS", 1)
    group = entry["headCommit"]["oid"]
    ref = f"gh-readonly-queue/main/pr-{one.number}-{head}"
    assert (await sim.git.heads(repo.git_dir))[ref] == group
    info = await sim.git.commit_info(repo.git_dir, group)
    assert info.parents == [base, head]
    [requested] = groups(sim, "checks_requested")
    assert requested["merge_group"] | {"head_commit": None} == {
        "head_sha": group, "head_ref": f"refs/heads/{ref}", "base_sha": base,
        "base_ref": "refs/heads/main", "head_commit": None}
    assert requested["merge_group"]["head_commit"]["id"] == group
    assert requested["repository"]["full_name"] == REPO and requested["sender"]["login"]
    [effect] = sim.effects("enqueue")
    assert (effect["number"], effect["expected_head"], effect["group_sha"], effect["new"]) == (
        one.number, head, group, True)
    state = await queue_state(api, one.number)
    assert state["isInMergeQueue"] and state["mergeQueueEntry"]["baseCommit"]["oid"] == base
    assert state["mergeQueueEntry"]["pullRequest"]["number"] == one.number

    await sim.set_check_run(REPO, group, "ci")
    assert (await queue_state(api, one.number))["state"] == "OPEN"  # lint has not reported
    await sim.set_check_run(REPO, group, "lint", conclusion="neutral")
    assert await sim.git.branch_sha(repo.git_dir, "main") == group  # a fast-forward
    assert ref not in await sim.git.heads(repo.git_dir)
    state = await queue_state(api, one.number)
    assert (state["state"], state["isInMergeQueue"], state["mergeQueueEntry"]) == ("MERGED", False, None)
    pull = (await api.get(f"repos/{REPO}/pulls/{one.number}")).json()
    assert (pull["merged"], pull["merge_commit_sha"]) == (True, group)
    [merge] = sim.effects("merge")
    assert (merge["sha"], merge["method"], merge["expected_head"]) == (group, "merge_queue", head)
    [destroyed] = groups(sim, "destroyed")
    assert (destroyed["reason"], destroyed["merge_group"]["head_sha"]) == ("merged", group)
    assert dequeued(sim) == [(one.number, "MERGE")]
    closed = [d.payload for d in sim.deliveries if d.event == "pull_request" and d.action == "closed"]
    assert [c["pull_request"]["merged"] for c in closed] == [True]
    assert [u["via"] for u in sim.ref_updates if u["ref"] == "refs/heads/main"] == ["merge_queue"]
    assert sim.forced_pushes() == [] and sim.duplicate_effects() == []


async def test_enqueue_refuses_a_head_that_is_not_the_expected_one(api, sim, prs):
    one, _ = prs
    await sim.require_merge_queue(REPO, checks=["ci"])
    answer = await enqueue(api, one.number, "0" * 40)
    [error] = answer["errors"]
    assert error["type"] == "UNPROCESSABLE" and "does not match" in error["message"]
    assert answer["data"]["enqueuePullRequest"] is None
    assert not (await queue_state(api, one.number))["isInMergeQueue"]
    assert sim.effects("enqueue") == [] and len(sim.effects("enqueue_refused")) == 1
    assert groups(sim) == []


async def test_a_second_enqueue_keeps_the_one_entry_and_is_recorded_as_a_duplicate(api, sim, prs):
    one, _ = prs
    await sim.require_merge_queue(REPO, checks=["ci"])
    first = (await enqueue(api, one.number))["data"]["enqueuePullRequest"]["mergeQueueEntry"]
    again = (await enqueue(api, one.number))["data"]["enqueuePullRequest"]["mergeQueueEntry"]
    assert again == first
    assert [e["new"] for e in sim.effects("enqueue")] == [True, False]
    assert len(groups(sim, "checks_requested")) == 1
    [dup] = sim.duplicate_effects()
    assert (dup["kind"], dup["number"], dup["entry"], dup["count"]) == ("enqueue", one.number, first["id"], 2)


async def test_a_failing_check_removes_the_entry_and_rebuilds_the_groups_behind_it(api, sim, prs):
    one, two = prs
    await sim.require_merge_queue(REPO, checks=["ci"])
    repo = sim.repo(REPO)
    base = await sim.git.branch_sha(repo.git_dir, "main")
    g1 = (await enqueue(api, one.number))["data"]["enqueuePullRequest"]["mergeQueueEntry"]
    g2 = (await enqueue(api, two.number))["data"]["enqueuePullRequest"]["mergeQueueEntry"]
    assert (g1["position"], g2["position"]) == (1, 2)
    # The second group holds the first: it is built on it.
    assert (await sim.git.commit_info(repo.git_dir, g2["headCommit"]["oid"])).parents[0] == g1["headCommit"]["oid"]

    await sim.set_check_run(REPO, g1["headCommit"]["oid"], "ci", conclusion="failure")
    one_state, two_state = await queue_state(api, one.number), await queue_state(api, two.number)
    assert (one_state["state"], one_state["isInMergeQueue"]) == ("OPEN", False)
    assert two_state["mergeQueueEntry"]["position"] == 1
    rebuilt = two_state["mergeQueueEntry"]["headCommit"]["oid"]
    assert rebuilt != g2["headCommit"]["oid"]
    assert (await sim.git.commit_info(repo.git_dir, rebuilt)).parents[0] == base
    assert [(g["reason"], g["merge_group"]["head_sha"]) for g in groups(sim, "destroyed")] == [
        ("dequeued", g1["headCommit"]["oid"]), ("invalidated", g2["headCommit"]["oid"])]
    assert groups(sim, "checks_requested")[-1]["merge_group"]["head_sha"] == rebuilt
    assert dequeued(sim) == [(one.number, "CI_FAILURE")]
    assert await sim.git.branch_sha(repo.git_dir, "main") == base
    assert sim.effects("merge") == []

    await sim.set_status(REPO, rebuilt, "success", context="ci")  # a status counts as a check
    assert (await queue_state(api, two.number))["state"] == "MERGED"
    assert await sim.git.branch_sha(repo.git_dir, "main") == rebuilt


async def test_a_push_to_a_queued_branch_takes_the_pr_out_of_the_queue(api, sim, prs):
    one, _ = prs
    await sim.require_merge_queue(REPO, checks=["ci"])
    g1 = (await enqueue(api, one.number))["data"]["enqueuePullRequest"]["mergeQueueEntry"]
    await sim.push(REPO, "one", {"a.py": "a = 3\n"}, author="alice")
    assert not (await queue_state(api, one.number))["isInMergeQueue"]
    [destroyed] = groups(sim, "destroyed")
    assert (destroyed["reason"], destroyed["merge_group"]["head_sha"]) == ("dequeued", g1["headCommit"]["oid"])
    assert [n for n, _ in dequeued(sim)] == [one.number]


@pytest.fixture
async def client(simulator):
    from bot.github.client import GitHubClient, open_github

    async with open_github(api_url=simulator.url, token="t", timeout=2, read_timeout=2) as gh:
        yield GitHubClient(gh, max_concurrency=4, call_timeout=4)


async def test_the_client_reads_the_queue_and_a_refused_enqueue_is_a_conflict(client, sim, prs):
    from bot.github.errors import Conflict

    one, _ = prs
    await sim.require_merge_queue(REPO, checks=["ci"])
    state = await client.merge_queue("acme", "widgets", one.number)
    assert (state["isMergeQueueEnabled"], state["isInMergeQueue"], state["mergeQueueEntry"]) == (True, False, None)
    with pytest.raises(Conflict, match="does not match"):
        await client.enqueue("acme", "widgets", one.number, state["id"], "0" * 40)
    entry = await client.enqueue("acme", "widgets", one.number, state["id"], state["headRefOid"])
    assert (entry["position"], entry["state"]) == (1, "AWAITING_CHECKS")
    state = await client.merge_queue("acme", "widgets", one.number)
    assert state["isInMergeQueue"] and state["mergeQueueEntry"] == entry
