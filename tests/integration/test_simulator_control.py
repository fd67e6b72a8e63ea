"""The /_sim/ control API over HTTP, and scenario files."""

from __future__ import annotations

import json

import httpx
import pytest

from simulator import DEMO_SCENARIO, ScenarioError, load_scenario, parse_scenario
from tests.simulator_fixtures import start_simulator

REPO = "acme/widgets"
BASE = f"_sim/repos/{REPO}"


@pytest.fixture
async def number(api):
    created = await api.post("_sim/repos", json={"name": REPO, "files": {"a.py": "x = 1\n"},
                                                 "collaborators": {"alice": "admin"}})
    assert created.status_code == 201
    assert created.json()["clone_url"].startswith("file://")
    opened = await api.post(f"{BASE}/pulls", json={
        "title": "Change x", "head": "change", "author": "alice", "labels": ["converge"],
        "files": {"a.py": "x = 2\n"}, "body": "Depends-on: acme/other#1"})
    assert opened.status_code == 201
    assert opened.json()["labels"][0]["name"] == "converge"
    return opened.json()["number"]


async def test_pr_lifecycle_through_the_control_api(api, sim, number):
    pushed = await api.post(f"{BASE}/push", json={"branch": "change", "files": {"b.py": "y\n"},
                                                  "author": "alice"})
    assert pushed.status_code == 201
    pull = (await api.get(f"repos/{REPO}/pulls/{number}")).json()
    assert pull["head"]["sha"] == pushed.json()["sha"]

    review = await api.post(f"{BASE}/pulls/{number}/reviews", json={
        "user": "reviewer-bot[bot]", "state": "CHANGES_REQUESTED", "body": "fix",
        "threads": [{"path": "a.py", "line": 1, "body": "x should be 3"}]})
    assert review.status_code == 201 and review.json()["state"] == "CHANGES_REQUESTED"
    assert review.json()["user"]["type"] == "Bot"

    comment = await api.post(f"{BASE}/pulls/{number}/comments",
                             json={"user": "alice", "body": "/converge stop"})
    cid = comment.json()["id"]
    edited = await api.patch(f"{BASE}/comments/{cid}", json={"body": "/converge"})
    assert edited.json()["body"] == "/converge"
    assert (await api.delete(f"{BASE}/comments/{cid}")).status_code == 200
    assert (await api.get(f"repos/{REPO}/issues/comments/{cid}")).status_code == 404

    check = await api.post(f"{BASE}/check-runs", json={"ref": "change", "name": "ci",
                                                       "conclusion": "failure"})
    assert check.json()["conclusion"] == "failure"
    runs = (await api.get(f"repos/{REPO}/commits/change/check-runs")).json()
    assert [(r["name"], r["conclusion"]) for r in runs["check_runs"]] == [("ci", "failure")]
    await api.post(f"{BASE}/statuses", json={"ref": "change", "state": "pending",
                                             "context": "legacy"})
    combined = (await api.get(f"repos/{REPO}/commits/change/status")).json()
    assert (combined["state"], combined["total_count"]) == ("pending", 1)

    assert (await api.put(f"{BASE}/pulls/{number}/mergeable",
                          json={"mergeable_state": "blocked"})).status_code == 200
    assert (await api.get(f"repos/{REPO}/pulls/{number}")).json()["mergeable_state"] == "blocked"
    await api.put(f"{BASE}/pulls/{number}/mergeable", json={"mergeable_state": None})

    assert (await api.post(f"{BASE}/pulls/{number}/close", json={})).status_code == 200
    assert (await api.get(f"repos/{REPO}/pulls/{number}")).json()["state"] == "closed"
    await api.post(f"{BASE}/pulls/{number}/reopen", json={})
    merged = await api.post(f"{BASE}/pulls/{number}/merge", json={"method": "squash",
                                                                  "user": "alice"})
    assert merged.json()["merged"] is True
    pull = (await api.get(f"repos/{REPO}/pulls/{number}")).json()
    assert pull["merged"] is True and pull["merged_by"]["login"] == "alice"
    assert sim.side_effects == []  # nothing above came through the GitHub API


async def test_permissions_and_reviewer_scripts_can_be_set(api, sim, number):
    await api.put(f"{BASE}/collaborators/dave", json={"permission": "maintain"})
    perm = (await api.get(f"repos/{REPO}/collaborators/dave/permission")).json()
    assert (perm["permission"], perm["role_name"]) == ("write", "maintain")
    bad = await api.put(f"{BASE}/collaborators/dave", json={"permission": "owner"})
    assert bad.status_code == 422

    script = {"number": number, "login": "coderabbitai[bot]", "steps": [
        {"body": "nit", "threads": [{"path": "a.py", "line": 1, "body": "rename x"}]}]}
    assert (await api.put(f"{BASE}/reviewer", json=script)).status_code == 200
    await api.post(f"{BASE}/pulls/{number}/request-review",
                   json={"reviewers": ["coderabbitai[bot]"]})
    assert (await api.post("_sim/settle", json={})).status_code == 200
    reviews = (await api.get(f"repos/{REPO}/pulls/{number}/reviews")).json()
    assert [r["user"]["login"] for r in reviews] == ["coderabbitai[bot]"]
    typo = await api.put(f"{BASE}/reviewer", json={"login": "x", "stepz": []})
    assert typo.status_code == 422 and "steps" in typo.json()["message"]


async def test_webhook_settings_deliveries_side_effects_and_state(api, sim, number):
    assert (await api.put("_sim/webhooks", json={"url": "http://127.0.0.1:9/none",
                                                  "secret": "s"})).json()["secret_set"] is True
    faults = await api.put("_sim/webhooks/faults", json={"drop_next": 1})
    assert faults.json()["drop_next"] == 1
    await api.post(f"repos/{REPO}/issues/{number}/comments", json={"body": "from the bot"})
    await api.post("_sim/settle", json={})
    deliveries = (await api.get("_sim/deliveries", params={"event": "issue_comment",
                                                           "payload": "1"})).json()
    assert [(d["action"], d["dropped"]) for d in deliveries] == [("created", True)]
    assert deliveries[0]["payload"]["comment"]["body"] == "from the bot"

    effects = (await api.get("_sim/side-effects")).json()
    assert [(e["kind"], e["actor"], e["body"]) for e in effects] == [
        ("issue_comment", "convergebot[bot]", "from the bot")]
    assert (await api.delete("_sim/side-effects")).json() == []

    state = (await api.get("_sim/state")).json()
    [repo] = state["repos"]
    [pull] = repo["pulls"]
    assert pull["head_sha"] == repo["branches"]["change"]
    assert pull["comments"][0]["body"] == "from the bot"
    json.dumps(state)


async def test_control_errors_name_the_problem(api, number):
    missing = await api.post(f"{BASE}/pulls", json={"head": "x"})
    assert missing.status_code == 422 and "title" in missing.json()["message"]
    unknown_pr = await api.post(f"{BASE}/pulls/99/close", json={})
    assert unknown_pr.status_code == 404
    not_json = await api.post(f"{BASE}/push", content=b"{nope")
    assert not_json.status_code == 400
    assert (await api.get("_sim/nothing-here")).status_code == 404


async def test_demo_scenario_serves_its_repos_and_prs(tmp_path):
    server = await start_simulator(tmp_path, load_scenario(DEMO_SCENARIO))
    try:
        async with httpx.AsyncClient(base_url=server.url) as client:
            pulls = (await client.get("repos/acme/widgets/pulls")).json()
            assert sorted(p["number"] for p in pulls) == [1, 2, 3]
            assert all(p["labels"][0]["name"] == "converge" for p in pulls)
            assert pulls[0]["url"].startswith(server.url)  # rendered with the bound port
            runs = (await client.get("repos/acme/widgets/commits/feature/median/check-runs")).json()
            assert runs["check_runs"][0]["conclusion"] == "success"
    finally:
        await server.stop()


@pytest.mark.parametrize("data, message", [
    ({"repos": [{"name": "nope"}]}, "repos[0].name: expected owner/name"),
    ({"repos": [{"name": "a/b", "pulls": [{"head": "h", "files": {"x": "1"}}]}]},
     "repos[0].pulls[0].title: required"),
    ({"repos": [{"name": "a/b", "pulls": [{"title": "t", "head": "h", "files": {"x": 1}}]}]},
     "repos[0].pulls[0].files: expected a table"),
    ({"repos": [{"name": "a/b", "collaborators": {"x": "owner"}}]},
     "repos[0].collaborators.x: must be one of"),
    ({"repos": [{"name": "a/b", "reviewers": [{"steps": [{"state": "MEH"}]}]}]},
     "repos[0].reviewers[0].steps[0].state: must be one of"),
    ({"repos": [{"name": "a/b", "colaborators": {}}]}, "repos[0]: unknown field 'colaborators'"),
    ({"repos": [{"name": "a/b", "reviewers": [{"delay": "soon", "steps": [{}]}]}]},
     "repos[0].reviewers[0].delay: expected float"),
])
def test_scenario_errors_name_the_bad_field(data, message):
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(data, "s.toml")
    assert message in str(caught.value)


def test_scenario_files_load_from_toml_and_json(tmp_path):
    toml = tmp_path / "s.toml"
    toml.write_text('[[repos]]\nname = "a/b"\n[[repos.pulls]]\ntitle = "t"\nhead = "h"\n'
                    '[repos.pulls.files]\n"x.txt" = "1"\n')
    as_json = tmp_path / "s.json"
    as_json.write_text(json.dumps({"repos": [{"name": "a/b"}]}))
    assert load_scenario(toml).repos[0].pulls[0].files == {"x.txt": "1"}
    assert load_scenario(as_json).repos[0].name == "a/b"
    broken = tmp_path / "broken.toml"
    broken.write_text("[[repos]\n")
    with pytest.raises(ScenarioError, match="broken.toml"):
        load_scenario(broken)
