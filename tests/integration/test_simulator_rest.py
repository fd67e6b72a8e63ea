"""The simulator's REST surface over real HTTP: shapes, pagination, ETags, auth, permissions."""

from __future__ import annotations

import base64
import re
import warnings

import httpx
import pytest
from githubkit import GitHub, TokenAuthStrategy

from tests.simulator_fixtures import start_simulator

REPO = "acme/widgets"


@pytest.fixture
async def pr(sim):
    await sim.create_repo(REPO, files={"app.py": "print('hi')\n"},
                          collaborators={"alice": "admin", "mia": "maintain", "bob": "write",
                                         "tia": "triage", "rita": "read"})
    return await sim.open_pr(REPO, title="Add feature", head="feature", author="alice",
                             files={"app.py": "print('hello')\n"})


def _links(header: str) -> dict[str, str]:
    return {rel: url for url, rel in re.findall(r'<([^>]+)>; rel="(\w+)"', header)}


async def test_issue_comments_paginate_with_absolute_links(api, sim, pr, simulator):
    for i in range(35):
        await sim.comment(REPO, pr.number, f"comment {i}", user="bob")

    first = await api.get(f"repos/{REPO}/issues/{pr.number}/comments")
    assert first.status_code == 200
    assert [c["body"] for c in first.json()] == [f"comment {i}" for i in range(30)]
    links = _links(first.headers["link"])
    assert set(links) == {"next", "last"}
    assert links["next"].startswith(simulator.url) and "page=2" in links["next"]
    # GitHub's next links name the repository by id, not by owner and name.
    repo_id = sim.repo(REPO).id
    assert f"/repositories/{repo_id}/issues/{pr.number}/comments?" in links["next"], links["next"]

    second = await api.get(links["next"])  # an absolute URL, followed as is
    assert [c["body"] for c in second.json()] == [f"comment {i}" for i in range(30, 35)]
    back = _links(second.headers["link"])
    assert set(back) == {"first", "prev"} and "page=1" in back["prev"]
    assert sim.counters.get("GET", "/repositories/{repository_id}/issues/{number}/comments", 200) == 1
    assert (await api.get(f"repositories/999999/issues/{pr.number}/comments")).status_code == 404

    small = await api.get(f"repos/{REPO}/issues/{pr.number}/comments",
                          params={"per_page": 10, "page": 2})
    assert [c["body"] for c in small.json()] == [f"comment {i}" for i in range(10, 20)]
    assert "page=4" in _links(small.headers["link"])["last"]
    assert "per_page=10" in _links(small.headers["link"])["next"]


async def test_unchanged_get_revalidates_to_304_without_spending_rate_limit(api, sim, pr):
    route = "/repos/{owner}/{repo}/pulls/{number}"
    fresh = await api.get(f"repos/{REPO}/pulls/{pr.number}")
    etag, remaining = fresh.headers["etag"], int(fresh.headers["x-ratelimit-remaining"])
    assert etag.startswith('W/"')

    again = await api.get(f"repos/{REPO}/pulls/{pr.number}", headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    assert int(again.headers["x-ratelimit-remaining"]) == remaining
    assert sim.counters.get("GET", route, 304) == 1
    assert sim.counters.get("GET", route, 200) == 1

    await sim.comment(REPO, pr.number, "a change", user="bob")  # the PR's comment count moves
    changed = await api.get(f"repos/{REPO}/pulls/{pr.number}", headers={"If-None-Match": etag})
    assert changed.status_code == 200 and changed.headers["etag"] != etag
    assert int(changed.headers["x-ratelimit-remaining"]) == remaining - 1


async def test_tokens_are_required_when_configured(tmp_path):
    server = await start_simulator(tmp_path, tokens={"good"})
    try:
        await server.sim.create_repo(REPO)
        async with httpx.AsyncClient(base_url=server.url) as client:
            none = await client.get(f"repos/{REPO}")
            bad = await client.get(f"repos/{REPO}", headers={"Authorization": "token nope"})
            good = await client.get(f"repos/{REPO}", headers={"Authorization": "Bearer good"})
        assert (none.status_code, bad.status_code, good.status_code) == (401, 401, 200)
        assert bad.json()["message"] == "Bad credentials"
        assert server.sim.counters.get(status=401) == 2
    finally:
        await server.stop()


async def test_unknown_things_are_404_not_found(api, pr):
    for path in (f"repos/{REPO}/pulls/99", "repos/nobody/nothing", f"repos/{REPO}/nonsense",
                 f"repos/{REPO}/git/ref/heads/missing", f"repos/{REPO}/contents/nope.txt"):
        resp = await api.get(path)
        assert resp.status_code == 404, path
        assert resp.json()["message"] == "Not Found"


@pytest.mark.parametrize("login, permission, role", [
    ("alice", "admin", "admin"), ("mia", "write", "maintain"), ("bob", "write", "write"),
    ("tia", "read", "triage"), ("rita", "read", "read"), ("stranger", "none", "none"),
    ("acme", "admin", "admin"),
])
async def test_collaborator_permission(api, pr, login, permission, role):
    resp = await api.get(f"repos/{REPO}/collaborators/{login}/permission")
    assert resp.status_code == 200
    body = resp.json()
    assert (body["permission"], body["role_name"], body["user"]["login"]) == (permission, role,
                                                                             login)


async def test_reaction_is_created_once_per_user_and_content(api, sim, pr):
    comment = await sim.comment(REPO, pr.number, "/converge", user="bob")
    url = f"repos/{REPO}/issues/comments/{comment.id}/reactions"
    first = await api.post(url, json={"content": "eyes"})
    repeat = await api.post(url, json={"content": "eyes"})
    other = await api.post(url, json={"content": "+1"})
    invalid = await api.post(url, json={"content": "shrug"})
    assert (first.status_code, repeat.status_code, other.status_code) == (201, 200, 201)
    assert invalid.status_code == 422
    assert repeat.json()["id"] == first.json()["id"]
    assert first.json()["user"] == {**first.json()["user"], "login": "convergebot[bot]",
                                    "type": "Bot"}
    rollup = (await api.get(f"repos/{REPO}/issues/comments/{comment.id}")).json()["reactions"]
    assert (rollup["total_count"], rollup["eyes"], rollup["+1"]) == (2, 1, 1)
    assert [e["content"] for e in sim.effects("reaction")] == ["eyes", "+1"]


async def test_bot_writes_are_recorded_as_side_effects(api, sim, pr):
    posted = await api.post(f"repos/{REPO}/issues/{pr.number}/comments", json={"body": "hi"})
    assert posted.status_code == 201
    assert posted.json()["user"]["login"] == "convergebot[bot]"
    edited = await api.patch(f"repos/{REPO}/issues/comments/{posted.json()['id']}",
                             json={"body": "hello"})
    assert edited.json()["body"] == "hello"
    assert [(e["kind"], e["body"]) for e in sim.effects()] == [
        ("issue_comment", "hi"), ("issue_comment_edited", "hello")]


async def test_contents_are_read_from_git_at_a_ref(api, pr):
    on_head = await api.get(f"repos/{REPO}/contents/app.py", params={"ref": "feature"})
    on_main = await api.get(f"repos/{REPO}/contents/app.py")
    assert base64.b64decode(on_head.json()["content"]) == b"print('hello')\n"
    assert base64.b64decode(on_main.json()["content"]) == b"print('hi')\n"
    assert on_head.json()["encoding"] == "base64"


async def test_pull_list_filters_by_state(api, sim, pr):
    other = await sim.open_pr(REPO, title="Second", head="second", files={"b.txt": "b"})
    await sim.close_pr(REPO, other.number)
    open_ = await api.get(f"repos/{REPO}/pulls")
    closed = await api.get(f"repos/{REPO}/pulls", params={"state": "closed"})
    every = await api.get(f"repos/{REPO}/pulls", params={"state": "all"})
    assert [p["number"] for p in open_.json()] == [pr.number]
    assert [p["number"] for p in closed.json()] == [other.number]
    assert [p["number"] for p in every.json()] == [other.number, pr.number]
    assert "mergeable_state" not in open_.json()[0]  # list items are the simple shape


async def test_githubkit_reads_and_parses_a_pull_request(simulator, sim, pr):
    async with GitHub(TokenAuthStrategy("t"), base_url=simulator.url) as gh:
        resp = await gh.rest.pulls.async_get("acme", "widgets", pr.number)
        data = resp.json()
        assert data["number"] == pr.number and data["user"]["login"] == "alice"
        assert data["head"]["sha"] == await sim.head_sha(*sim.pr(REPO, pr.number))
        assert data["head"]["repo"]["clone_url"].startswith("file://")
        assert data["mergeable_state"] == "clean" and data["changed_files"] == 1
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # githubkit's strict models accept the shapes (they reject many near-misses).
            assert resp.parsed_data.number == pr.number
            reviews = await gh.rest.pulls.async_list_reviews("acme", "widgets", pr.number)
            assert reviews.parsed_data == []
            ref = await gh.rest.git.async_get_ref("acme", "widgets", "heads/feature")
            assert ref.parsed_data.object_.sha == data["head"]["sha"]


async def test_rate_limit_endpoint_is_free_and_reports_usage(api, pr):
    await api.get(f"repos/{REPO}")
    one = (await api.get("rate_limit")).json()
    two = (await api.get("rate_limit")).json()
    assert one["resources"]["core"]["used"] == two["resources"]["core"]["used"] == 1
    assert one["rate"]["remaining"] == 4999


async def test_github_app_auth_gets_an_installation_token(tmp_path):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from githubkit import AppInstallationAuthStrategy

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    server = await start_simulator(tmp_path, tokens={"only-this-one"})
    try:
        await server.sim.create_repo(REPO)
        async with GitHub(AppInstallationAuthStrategy("123", pem, 42),
                          base_url=server.url) as gh:
            resp = await gh.rest.repos.async_get("acme", "widgets")
        assert resp.json()["full_name"] == REPO
        assert len(server.sim.issued_tokens) == 1
        assert server.sim.counters.get("POST", "/app/installations/{installation_id}/access_tokens",
                                       201) == 1
    finally:
        await server.stop()


async def test_check_run_annotations_accumulate_and_are_listed(api, sim, pr):
    head = (await api.get(f"repos/{REPO}/pulls/{pr.number}")).json()["head"]["sha"]
    note = {"path": "app.py", "start_line": 1, "end_line": 1, "annotation_level": "failure",
            "message": "NameError: name 'x' is not defined"}
    created = await api.post(f"repos/{REPO}/check-runs", json={
        "name": "ci/test", "head_sha": head, "conclusion": "failure",
        "output": {"title": "1 failed", "summary": "s", "annotations": [note]}})
    assert created.status_code == 201
    run_id = created.json()["id"]
    await api.patch(f"repos/{REPO}/check-runs/{run_id}",
                    json={"output": {"title": "1 failed", "summary": "s", "annotations": [note | {"start_line": 3,
                                                                                                  "end_line": 3}]}})
    run = (await api.get(f"repos/{REPO}/check-runs/{run_id}")).json()
    assert run["output"]["annotations_count"] == 2
    listed = (await api.get(f"repos/{REPO}/check-runs/{run_id}/annotations")).json()
    assert [(a["path"], a["start_line"], a["message"]) for a in listed] == [
        ("app.py", 1, note["message"]), ("app.py", 3, note["message"])]
    bad = await api.post(f"repos/{REPO}/check-runs", json={
        "name": "ci/lint", "head_sha": head, "output": {"title": "t", "summary": "s",
                                                        "annotations": [{"path": "app.py"}]}})
    assert bad.status_code == 422
