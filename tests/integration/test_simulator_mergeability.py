"""Mergeability comes from git, as on GitHub: a PR whose head and base do not merge is `dirty`,
one whose base moved on is `behind` only where the repository requires branches up to date,
and what a test set with `set_mergeable` wins. REST and GraphQL say the same."""

from __future__ import annotations

import pytest

REPO = "acme/widgets"
OWNER, NAME = REPO.split("/")


@pytest.fixture
async def pr(sim):
    await sim.create_repo(REPO, files={"app.py": "one\ntwo\nthree\n", "docs.md": "# Docs\n"})
    return await sim.open_pr(REPO, title="Change two", head="fix", author="alice",
                             files={"app.py": "one\nTWO\nthree\n"})


async def rest(api, number: int) -> tuple[bool | None, str]:
    pull = (await api.get(f"repos/{REPO}/pulls/{number}")).json()
    return pull["mergeable"], pull["mergeable_state"]


async def graphql(api, number: int) -> str:
    query = ('query($o: String!, $n: String!, $num: Int!) { repository(owner: $o, name: $n) '
             '{ pullRequest(number: $num) { mergeable } } }')
    resp = await api.post("graphql", json={"query": query,
                                           "variables": {"o": OWNER, "n": NAME, "num": number}})
    assert resp.status_code == 200, resp.text
    return resp.json()["data"]["repository"]["pullRequest"]["mergeable"]


async def test_a_pr_that_merges_cleanly_is_clean_in_rest_and_graphql(api, sim, pr):
    await sim.push(REPO, "main", {"docs.md": "# The docs\n"})  # base moves, no conflict
    assert await rest(api, pr.number) == (True, "clean")
    assert await graphql(api, pr.number) == "MERGEABLE"


async def test_a_conflict_with_the_base_makes_it_dirty_and_unmergeable(api, sim, pr):
    await sim.push(REPO, "main", {"app.py": "one\n2\nthree\n"})  # the same line, differently
    assert await rest(api, pr.number) == (False, "dirty")
    assert await graphql(api, pr.number) == "CONFLICTING"
    resp = await api.put(f"repos/{REPO}/pulls/{pr.number}/merge", json={})
    assert resp.status_code == 405 and resp.json()["message"] == "Pull Request is not mergeable"


async def test_a_push_that_resolves_the_conflict_makes_it_clean_again(api, sim, pr):
    await sim.push(REPO, "main", {"app.py": "one\n2\nthree\n"})
    assert await rest(api, pr.number) == (False, "dirty")
    await sim.push(REPO, "fix", {"app.py": "one\n2\nthree\n"}, author="alice")
    assert await rest(api, pr.number) == (True, "clean")
    assert await graphql(api, pr.number) == "MERGEABLE"
    assert (await api.put(f"repos/{REPO}/pulls/{pr.number}/merge", json={})).status_code == 200


async def test_what_a_test_set_wins_over_what_git_says_until_it_is_cleared(api, sim, pr):
    await sim.push(REPO, "main", {"app.py": "one\n2\nthree\n"})
    await sim.set_mergeable(REPO, pr.number, "unstable")
    assert await rest(api, pr.number) == (True, "unstable")
    assert await graphql(api, pr.number) == "MERGEABLE"
    await sim.set_mergeable(REPO, pr.number, "unknown")
    assert await rest(api, pr.number) == (None, "unknown")
    assert await graphql(api, pr.number) == "UNKNOWN"
    await sim.set_mergeable(REPO, pr.number, None)
    assert await rest(api, pr.number) == (False, "dirty")


async def test_a_draft_reads_draft_but_still_tells_its_conflicts(api, sim, pr):
    draft = await sim.open_pr(REPO, title="WIP", head="wip", author="bob", draft=True,
                              files={"app.py": "one\nzwei\nthree\n"})
    assert await rest(api, draft.number) == (True, "draft")
    await sim.push(REPO, "main", {"app.py": "one\n2\nthree\n"})
    assert await rest(api, draft.number) == (False, "draft")
    assert await graphql(api, draft.number) == "CONFLICTING"


async def test_behind_only_where_the_repository_requires_branches_up_to_date(api, sim, pr):
    await sim.push(REPO, "main", {"docs.md": "# The docs\n"})
    assert await rest(api, pr.number) == (True, "clean")  # GitHub's default: not required

    resp = await api.patch(f"_sim/repos/{REPO}/settings", json={"require_up_to_date": True})
    assert resp.status_code == 200 and resp.json() == {"require_up_to_date": True}
    assert await rest(api, pr.number) == (True, "behind")
    assert await graphql(api, pr.number) == "MERGEABLE"
    refused = await api.put(f"repos/{REPO}/pulls/{pr.number}/merge", json={})
    assert refused.status_code == 405
    assert refused.json()["message"] == "Head branch is not up to date with the base branch"

    assert (await api.put(f"repos/{REPO}/pulls/{pr.number}/update-branch",
                          json={})).status_code == 202
    assert await rest(api, pr.number) == (True, "clean")
    assert (await api.put(f"repos/{REPO}/pulls/{pr.number}/merge", json={})).status_code == 200


async def test_a_conflict_outranks_behind(api, sim, pr):
    await sim.require_up_to_date(REPO)
    await sim.push(REPO, "main", {"app.py": "one\n2\nthree\n"})
    assert await rest(api, pr.number) == (False, "dirty")


async def test_the_settings_endpoint_takes_only_a_boolean(api, sim, pr):
    resp = await api.patch(f"_sim/repos/{REPO}/settings", json={"require_up_to_date": "yes"})
    assert resp.status_code == 422
    assert sim.repo(REPO).require_up_to_date is False


async def test_git_is_asked_once_per_pair_of_heads(api, sim, pr):
    """Reads of an unchanged PR cost no git: the answer is kept per (base sha, head sha)."""
    await rest(api, pr.number)  # the PR's first read may be the first look at this pair
    before = sim.git.calls["merge-tree"]
    for _ in range(3):
        await rest(api, pr.number)
        await graphql(api, pr.number)
    assert sim.git.calls["merge-tree"] == before
    await sim.push(REPO, "fix", {"notes.md": "more\n"}, author="alice")
    await rest(api, pr.number)
    await rest(api, pr.number)
    assert sim.git.calls["merge-tree"] == before + 1


async def test_a_closed_pr_has_no_mergeability(api, sim, pr):
    await sim.push(REPO, "main", {"app.py": "one\n2\nthree\n"})
    await sim.close_pr(REPO, pr.number, actor="alice")
    assert await rest(api, pr.number) == (None, "unknown")
    assert await graphql(api, pr.number) == "UNKNOWN"


async def test_required_approving_reviews_block_until_enough_writers_approve(api, sim, pr):
    """Branch protection's required approving reviews: each writer's last approval or change
    request counts (the author's, a reader's and a comment do not); one change request holds
    the PR; the merge is refused as GitHub refuses it. GraphQL shows the rule and the decision."""
    query = ('query($o: String!, $n: String!, $num: Int!) { repository(owner: $o, name: $n) { pullRequest(number: $num) '
             '{ reviewDecision baseRef { refUpdateRule { requiredApprovingReviewCount requiresCodeOwnerReviews } } } } }')

    async def decision() -> dict:
        resp = await api.post("graphql", json={"query": query, "variables": {"o": OWNER, "n": NAME, "num": pr.number}})
        assert resp.status_code == 200, resp.text
        return resp.json()["data"]["repository"]["pullRequest"]

    assert (await decision()) == {"reviewDecision": None, "baseRef": {"refUpdateRule": None}}
    for login, role in (("bob", "write"), ("carol", "maintain"), ("reader", "read")):
        await sim.set_permission(REPO, login, role)
    sim.set_required_reviews(REPO, 2)
    assert (await decision()) == {"reviewDecision": "REVIEW_REQUIRED", "baseRef": {"refUpdateRule": {
        "requiredApprovingReviewCount": 2, "requiresCodeOwnerReviews": False}}}
    assert await rest(api, pr.number) == (True, "blocked")
    for user, state in (("alice", "APPROVED"), ("reader", "APPROVED"), ("bob", "COMMENTED"), ("bob", "APPROVED")):
        await sim.submit_review(REPO, pr.number, user=user, state=state)
    assert await rest(api, pr.number) == (True, "blocked")
    resp = await api.put(f"repos/{REPO}/pulls/{pr.number}/merge", json={})
    assert resp.status_code == 405
    assert resp.json()["message"] == "At least 2 approving reviews are required by reviewers with write access."
    await sim.submit_review(REPO, pr.number, user="carol", state="CHANGES_REQUESTED")
    assert (await decision())["reviewDecision"] == "CHANGES_REQUESTED"
    await sim.submit_review(REPO, pr.number, user="carol", state="APPROVED")
    assert (await decision())["reviewDecision"] == "APPROVED"
    assert await rest(api, pr.number) == (True, "clean")
    sim.set_required_reviews(REPO, 0)
    assert (await decision())["reviewDecision"] is None
    with pytest.raises(ValueError):
        sim.set_required_reviews(REPO, 7)
