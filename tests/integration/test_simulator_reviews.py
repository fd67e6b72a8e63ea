"""Scripted reviewers, review threads through GraphQL, replies and outdated threads."""

from __future__ import annotations

import pytest

from simulator import COPILOT_LOGIN, ReviewerScript, ReviewStep, ThreadSpec

REPO = "acme/widgets"
FILE = "".join(f"line {i}\n" for i in range(1, 31))

THREADS_QUERY = """
query($owner: String!, $name: String!, $number: Int!, $after: String) {
  repository(owner: $owner, name: $name) {
    pullRequest(number: $number) {
      id number headRefOid
      reviewThreads(first: 2, after: $after) {
        totalCount
        pageInfo { hasNextPage endCursor }
        nodes {
          id isResolved isOutdated path line
          comments(first: 10) { nodes { id databaseId fullDatabaseId body author { login } createdAt url } }
        }
      }
    }
  }
  rateLimit { remaining }
}
"""
RESOLVE = """
mutation($id: ID!) { resolveReviewThread(input: {threadId: $id}) { thread { id isResolved } } }
"""


@pytest.fixture
async def pr(sim):
    await sim.create_repo(REPO, files={"app.py": FILE})
    script = ReviewerScript(delay=0.05, steps=[
        ReviewStep(body="3 comments", threads=[
            ThreadSpec("app.py", 3, "first"), ThreadSpec("app.py", 20, "second"),
            ThreadSpec("app.py", 25, "third")]),
        ReviewStep(body="no new comments", state="APPROVED"),
    ])
    return await sim.open_pr(REPO, title="Edit", head="edit", author="alice",
                             files={"app.py": FILE.replace("line 2\n", "line two\n")},
                             reviewers=[script])


async def graphql(api, query: str, **variables) -> dict:
    resp = await api.post("graphql", json={"query": query, "variables": variables})
    assert resp.status_code == 200
    return resp.json()


async def all_threads(api, number: int) -> list[dict]:
    threads, after = [], None
    while True:
        data = await graphql(api, THREADS_QUERY, owner="acme", name="widgets", number=number,
                             after=after)
        page = data["data"]["repository"]["pullRequest"]["reviewThreads"]
        threads += page["nodes"]
        if not page["pageInfo"]["hasNextPage"]:
            return threads
        after = page["pageInfo"]["endCursor"]


async def test_requested_review_opens_threads_visible_and_resolvable_in_graphql(api, sim, pr):
    resp = await api.post(f"repos/{REPO}/pulls/{pr.number}/requested_reviewers",
                          json={"reviewers": [COPILOT_LOGIN]})
    assert resp.status_code == 201
    assert [u["login"] for u in resp.json()["requested_reviewers"]] == [COPILOT_LOGIN]
    await sim.settle()

    head = await sim.head_sha(*sim.pr(REPO, pr.number))
    [review] = (await api.get(f"repos/{REPO}/pulls/{pr.number}/reviews")).json()
    assert (review["user"]["login"], review["user"]["type"]) == (COPILOT_LOGIN, "Bot")
    assert review["commit_id"] == head and review["body"] == "3 comments"
    pending = (await api.get(f"repos/{REPO}/pulls/{pr.number}/requested_reviewers")).json()
    assert pending["users"] == []

    threads = await all_threads(api, pr.number)  # two pages of two
    assert [(t["path"], t["line"], t["isResolved"], t["isOutdated"]) for t in threads] == [
        ("app.py", 3, False, False), ("app.py", 20, False, False), ("app.py", 25, False, False)]
    first = threads[0]["comments"]["nodes"][0]
    assert first["body"] == "first" and first["author"]["login"] == "copilot-pull-request-reviewer"
    rest_id = (await api.get(f"repos/{REPO}/pulls/{pr.number}/comments")).json()[0]["id"]
    assert first["databaseId"] == rest_id and first["fullDatabaseId"] == str(rest_id)  # a BigInt is a string

    resolved = await graphql(api, RESOLVE, id=threads[0]["id"])
    assert resolved["data"]["resolveReviewThread"]["thread"] == {"id": threads[0]["id"],
                                                                 "isResolved": True}
    after = await all_threads(api, pr.number)
    assert [t["isResolved"] for t in after] == [True, False, False]
    assert sim.effects("thread_resolved")[0]["thread_id"] == threads[0]["id"]


async def test_a_review_comment_s_full_database_id_is_a_bigint_and_its_database_id_deprecated(api):
    data = await graphql(api, """{ __type(name: "PullRequestReviewComment") {
        fields(includeDeprecated: true) { name isDeprecated type { name } } } }""")
    fields = {f["name"]: f for f in data["data"]["__type"]["fields"]}
    assert (fields["fullDatabaseId"]["type"]["name"], fields["fullDatabaseId"]["isDeprecated"]) == ("BigInt", False)
    assert (fields["databaseId"]["type"]["name"], fields["databaseId"]["isDeprecated"]) == ("Int", True)


async def test_script_steps_advance_and_the_last_one_repeats(api, sim, pr):
    for _ in range(3):
        await sim.request_copilot_review(REPO, pr.number, actor="convergebot[bot]")
        await sim.settle()
    reviews = (await api.get(f"repos/{REPO}/pulls/{pr.number}/reviews")).json()
    assert [(r["body"], r["state"]) for r in reviews] == [
        ("3 comments", "COMMENTED"), ("no new comments", "APPROVED"),
        ("no new comments", "APPROVED")]
    assert [r["id"] for r in reviews] == sorted(r["id"] for r in reviews)


async def test_copilot_endpoint_is_409_while_a_review_is_pending(api, sim, pr):
    # A review that stays pending for the whole test (the fixture's answers in 50 ms, which a
    # busy machine can take between the two requests).
    sim.set_reviewer(REPO, ReviewerScript(delay=60.0, steps=[ReviewStep(body="slow")]), pr.number)
    url = f"repos/{REPO}/pulls/{pr.number}/copilot-code-review"
    assert (await api.post(url)).status_code == 202
    second = await api.post(url)
    assert second.status_code == 409


async def test_review_of_a_head_that_moved_during_the_delay_keeps_its_commit(api, sim, pr):
    sim.set_reviewer(REPO, ReviewerScript(delay=1.0, steps=[ReviewStep(body="slow")]), pr.number)
    asked_at = await sim.head_sha(*sim.pr(REPO, pr.number))
    await sim.request_copilot_review(REPO, pr.number, actor="convergebot[bot]")
    moved = await sim.push(REPO, "edit", {"other.txt": "x"})  # lands within the delay
    await sim.settle()
    [review] = (await api.get(f"repos/{REPO}/pulls/{pr.number}/reviews")).json()
    assert review["commit_id"] == asked_at != moved


async def test_threads_go_outdated_only_where_the_lines_changed(api, sim, pr):
    await sim.request_copilot_review(REPO, pr.number, actor="convergebot[bot]")
    await sim.settle()
    fixed = FILE.replace("line 2\n", "line two\n").replace("line 20\n", "line twenty\n")
    await sim.push(REPO, "edit", {"app.py": fixed})
    threads = await all_threads(api, pr.number)
    # Only line 20 changed since the review; line 3's neighbourhood includes line 2, but that
    # was already "line two" in the reviewed commit, so the thread stays current.
    assert [(t["isOutdated"], t["line"]) for t in threads] == [(False, 3), (True, None),
                                                                (False, 25)]
    comments = (await api.get(f"repos/{REPO}/pulls/{pr.number}/comments")).json()
    assert [c["line"] for c in comments] == [3, None, 25]
    assert [c["original_line"] for c in comments] == [3, 20, 25]


async def test_reply_joins_the_thread_and_brings_its_own_review(api, sim, pr):
    await sim.request_copilot_review(REPO, pr.number, actor="convergebot[bot]")
    await sim.settle()
    top = (await api.get(f"repos/{REPO}/pulls/{pr.number}/comments")).json()[0]
    resp = await api.post(f"repos/{REPO}/pulls/{pr.number}/comments/{top['id']}/replies",
                          json={"body": "Declined: out of scope"})
    assert resp.status_code == 201
    assert resp.json()["in_reply_to_id"] == top["id"]
    assert resp.json()["user"]["login"] == "convergebot[bot]"
    threads = await all_threads(api, pr.number)
    assert [c["body"] for c in threads[0]["comments"]["nodes"]] == ["first",
                                                                    "Declined: out of scope"]
    reviews = (await api.get(f"repos/{REPO}/pulls/{pr.number}/reviews")).json()
    assert [r["user"]["login"] for r in reviews] == [COPILOT_LOGIN, "convergebot[bot]"]
    assert sim.effects("review_reply")[0]["in_reply_to"] == top["id"]


async def test_auto_reviewer_reviews_every_new_head(api, sim):
    await sim.create_repo(REPO, files={"app.py": FILE})
    sim.set_reviewer(REPO, ReviewerScript(auto=True, steps=[ReviewStep(body="looked")]))
    pr = await sim.open_pr(REPO, title="Auto", head="auto", files={"a.txt": "1"})
    await sim.settle()
    second = await sim.push(REPO, "auto", {"a.txt": "2"})
    await sim.settle()
    reviews = (await api.get(f"repos/{REPO}/pulls/{pr.number}/reviews")).json()
    assert len(reviews) == 2 and reviews[-1]["commit_id"] == second


async def test_graphql_errors_have_githubs_shape(api, sim, pr):
    missing = await graphql(api, '{ repository(owner: "no", name: "pe") { id } }')
    assert missing["data"] == {"repository": None}
    assert missing["errors"][0]["type"] == "NOT_FOUND"
    bad_thread = await graphql(api, RESOLVE, id="PRRT_nonsense")
    assert bad_thread["errors"][0]["type"] == "NOT_FOUND"
    unpaginated = await graphql(api, """{ repository(owner: "acme", name: "widgets") {
        pullRequest(number: 1) { reviewThreads { totalCount } } } }""")
    assert "first" in unpaginated["errors"][0]["message"]
    syntax = await graphql(api, "{ repository(")
    assert "data" not in syntax and syntax["errors"]
