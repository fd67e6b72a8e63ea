"""Every REST operation convergebot calls, answered by a running simulator over real HTTP, must
match GitHub's own response schema (tests/fixtures/github-openapi-subset.json).

One case per operation of the subset. A case sets up what it needs through the simulator's
Python API, then makes its calls through `Api.call`, which builds the URL from the operation's
own path template, checks the status and validates the body. Adding an operation to the subset
without a case here fails `test_every_operation_of_the_subset_has_a_case`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator

from simulator import COPILOT_LOGIN, Simulator
from tests.openapi import assert_matches, operation_names, schema_for

REPO = "acme/widgets"
OWNER, NAME = REPO.split("/")


@dataclass
class Api:
    """Calls operations by name and validates what comes back against GitHub's schema."""

    client: httpx.AsyncClient
    exercised: set[str] = field(default_factory=set)

    async def call(self, operation: str, status: int, *, json: Any = None,
                   params: dict[str, Any] | None = None, headers: dict[str, str] | None = None,
                   **path_params: Any) -> Any:
        method, template = operation.split(" ", 1)
        path = template.format(owner=OWNER, repo=NAME, **path_params)
        resp = await self.client.request(method, path.lstrip("/"), json=json, params=params,
                                         headers=headers)
        assert resp.status_code == status, f"{operation}: {resp.status_code} {resp.text}"
        body = resp.json()
        assert_matches(operation, body, status=resp.status_code)
        self.exercised.add(operation)
        return body


@dataclass
class World:
    """A repository with one PR carrying everything the bot reads: a review with threads, a
    reply, an issue comment, a check run and a commit status on its head."""

    sim: Simulator
    number: int
    head: str
    review_comment_id: int
    issue_comment_id: int
    check_run_id: int


@pytest.fixture
async def api(simulator) -> AsyncIterator[Api]:
    async with httpx.AsyncClient(base_url=simulator.url, timeout=10,
                                 headers={"Authorization": "token t"}) as client:
        yield Api(client)


@pytest.fixture
async def world(sim) -> World:
    await sim.create_repo(REPO, files={"app.py": "x = 1\ny = 2\n", "docs/guide.md": "# Guide\n"},
                          collaborators={"alice": "admin", "bob": "write"},
                          description="Widgets")
    pr = await sim.open_pr(REPO, title="Change x", head="feature", author="alice",
                           body="Closes nothing.", labels=["converge"],
                           files={"app.py": "x = 3\ny = 2\n"})
    head = await sim.head_sha(sim.repo(REPO), pr)
    review = await sim.submit_review(REPO, pr.number, user=COPILOT_LOGIN, body="1 comment",
                                     threads=[{"path": "app.py", "line": 1, "body": "Why 3?"}])
    [first] = [c for c in sim.state.review_comments.values() if c.review_id == review.id]
    await sim.reply(REPO, pr.number, first.id, body="Because.", user="alice")
    comment = await sim.comment(REPO, pr.number, "/converge", user="alice")
    run = await sim.create_check_run(REPO, head_sha=head, name="ci", status="in_progress")
    await sim.set_status(REPO, head, "success", context="legacy-ci", description="ok",
                         target_url="https://ci.example/1")
    return World(sim, pr.number, head, first.id, comment.id, run.id)


Case = Callable[[Api, World], Awaitable[None]]
CASES: dict[str, Case] = {}


def case(operation: str) -> Callable[[Case], Case]:
    def register(fn: Case) -> Case:
        CASES[operation] = fn
        return fn
    return register


@case("GET /repos/{owner}/{repo}")
async def _get_repo(api: Api, w: World) -> None:
    await api.call("GET /repos/{owner}/{repo}", 200)


@case("GET /repos/{owner}/{repo}/pulls")
async def _list_pulls(api: Api, w: World) -> None:
    draft = await w.sim.open_pr(REPO, title="WIP", head="wip", author="bob", draft=True,
                                files={"notes.md": "todo\n"})
    pulls = await api.call("GET /repos/{owner}/{repo}/pulls", 200, params={"state": "all"})
    assert [(p["number"], p["draft"]) for p in pulls] == [(draft.number, True), (w.number, False)]


@case("GET /repos/{owner}/{repo}/pulls/{pull_number}")
async def _get_pull(api: Api, w: World) -> None:
    await w.sim.request_reviewers(REPO, w.number, ["bob"], actor="alice")
    pull = await api.call("GET /repos/{owner}/{repo}/pulls/{pull_number}", 200,
                          pull_number=w.number)
    assert pull["head"]["sha"] == w.head and pull["mergeable_state"] == "clean"
    await w.sim.merge_pr(REPO, w.number, actor="alice")
    merged = await api.call("GET /repos/{owner}/{repo}/pulls/{pull_number}", 200,
                            pull_number=w.number)
    assert merged["merged"] is True and merged["mergeable"] is None


@case("GET /repos/{owner}/{repo}/git/ref/{ref}")
async def _get_ref(api: Api, w: World) -> None:
    ref = await api.call("GET /repos/{owner}/{repo}/git/ref/{ref}", 200, ref="heads/feature")
    assert ref["object"]["sha"] == w.head


@case("GET /repos/{owner}/{repo}/pulls/{pull_number}/reviews")
async def _list_reviews(api: Api, w: World) -> None:
    reviews = await api.call("GET /repos/{owner}/{repo}/pulls/{pull_number}/reviews", 200,
                             pull_number=w.number)
    assert [r["user"]["login"] for r in reviews] == [COPILOT_LOGIN, "alice"]


@case("GET /repos/{owner}/{repo}/pulls/{pull_number}/comments")
async def _list_review_comments(api: Api, w: World) -> None:
    comments = await api.call("GET /repos/{owner}/{repo}/pulls/{pull_number}/comments", 200,
                              pull_number=w.number)
    assert [c.get("in_reply_to_id") for c in comments] == [None, w.review_comment_id]
    assert [c["line"] for c in comments] == [1, 1]


@case("POST /repos/{owner}/{repo}/pulls/{pull_number}/comments/{comment_id}/replies")
async def _reply(api: Api, w: World) -> None:
    reply = await api.call(
        "POST /repos/{owner}/{repo}/pulls/{pull_number}/comments/{comment_id}/replies", 201,
        pull_number=w.number, comment_id=w.review_comment_id, json={"body": "Fixed."})
    assert reply["in_reply_to_id"] == w.review_comment_id


@case("GET /repos/{owner}/{repo}/commits/{ref}/check-runs")
async def _runs_for_ref(api: Api, w: World) -> None:
    await w.sim.create_check_run(REPO, head_sha=w.head, name="lint", status="completed",
                                 conclusion="failure", output={"title": "1 error",
                                                               "summary": "E501"})
    runs = await api.call("GET /repos/{owner}/{repo}/commits/{ref}/check-runs", 200,
                          ref=w.head)
    assert runs["total_count"] == 2
    assert all(r["pull_requests"][0]["number"] == w.number for r in runs["check_runs"])


@case("GET /repos/{owner}/{repo}/commits/{ref}/status")
async def _combined_status(api: Api, w: World) -> None:
    combined = await api.call("GET /repos/{owner}/{repo}/commits/{ref}/status", 200,
                              ref="feature")
    assert combined["state"] == "success" and combined["sha"] == w.head
    empty = await api.call("GET /repos/{owner}/{repo}/commits/{ref}/status", 200, ref="main")
    assert empty["state"] == "pending" and empty["statuses"] == []


@case("POST /repos/{owner}/{repo}/check-runs")
async def _create_run(api: Api, w: World) -> None:
    run = await api.call("POST /repos/{owner}/{repo}/check-runs", 201,
                         json={"name": "convergebot", "head_sha": w.head, "status": "queued"})
    assert run["app"]["slug"] == "convergebot" and run["conclusion"] is None
    done = await api.call("POST /repos/{owner}/{repo}/check-runs", 201,
                          json={"name": "convergebot/done", "head_sha": w.head,
                                "status": "completed", "conclusion": "neutral",
                                "output": {"title": "Converged", "summary": "2 rounds"}})
    assert done["completed_at"] is not None


@case("PATCH /repos/{owner}/{repo}/check-runs/{check_run_id}")
async def _update_run(api: Api, w: World) -> None:
    run = await api.call("PATCH /repos/{owner}/{repo}/check-runs/{check_run_id}", 200,
                         check_run_id=w.check_run_id,
                         json={"status": "completed", "conclusion": "success",
                               "output": {"title": "Done", "summary": "All good", "text": "…"}})
    assert run["status"] == "completed" and run["output"]["title"] == "Done"


@case("GET /repos/{owner}/{repo}/collaborators/{username}/permission")
async def _permission(api: Api, w: World) -> None:
    operation = "GET /repos/{owner}/{repo}/collaborators/{username}/permission"
    admin = await api.call(operation, 200, username="alice")
    assert admin["permission"] == "admin"
    stranger = await api.call(operation, 200, username="mallory")
    assert stranger["permission"] == "none"


@case("GET /repos/{owner}/{repo}/issues/{issue_number}/comments")
async def _list_issue_comments(api: Api, w: World) -> None:
    await w.sim.react(REPO, "issue", w.issue_comment_id, "eyes", user="convergebot[bot]")
    comments = await api.call("GET /repos/{owner}/{repo}/issues/{issue_number}/comments", 200,
                              issue_number=w.number)
    assert [c["reactions"]["eyes"] for c in comments] == [1]


@case("POST /repos/{owner}/{repo}/issues/{issue_number}/comments")
async def _create_issue_comment(api: Api, w: World) -> None:
    comment = await api.call("POST /repos/{owner}/{repo}/issues/{issue_number}/comments", 201,
                             issue_number=w.number, json={"body": "Converged in 2 rounds."})
    assert comment["user"]["login"] == "convergebot[bot]"


@case("POST /repos/{owner}/{repo}/issues/comments/{comment_id}/reactions")
async def _react_issue_comment(api: Api, w: World) -> None:
    operation = "POST /repos/{owner}/{repo}/issues/comments/{comment_id}/reactions"
    await api.call(operation, 201, comment_id=w.issue_comment_id, json={"content": "eyes"})
    await api.call(operation, 200, comment_id=w.issue_comment_id, json={"content": "eyes"})


@case("POST /repos/{owner}/{repo}/pulls/comments/{comment_id}/reactions")
async def _react_review_comment(api: Api, w: World) -> None:
    operation = "POST /repos/{owner}/{repo}/pulls/comments/{comment_id}/reactions"
    await api.call(operation, 201, comment_id=w.review_comment_id, json={"content": "+1"})
    await api.call(operation, 200, comment_id=w.review_comment_id, json={"content": "+1"})


@case("POST /repos/{owner}/{repo}/pulls/{pull_number}/requested_reviewers")
async def _request_reviewers(api: Api, w: World) -> None:
    pull = await api.call("POST /repos/{owner}/{repo}/pulls/{pull_number}/requested_reviewers",
                          201, pull_number=w.number, json={"reviewers": [COPILOT_LOGIN]})
    assert [u["login"] for u in pull["requested_reviewers"]] == [COPILOT_LOGIN]


@case("GET /repos/{owner}/{repo}/pulls/{pull_number}/requested_reviewers")
async def _list_requested(api: Api, w: World) -> None:
    await w.sim.request_reviewers(REPO, w.number, ["bob", COPILOT_LOGIN], actor="alice")
    requested = await api.call(
        "GET /repos/{owner}/{repo}/pulls/{pull_number}/requested_reviewers", 200,
        pull_number=w.number)
    assert [u["login"] for u in requested["users"]] == ["bob", COPILOT_LOGIN]


@case("PUT /repos/{owner}/{repo}/pulls/{pull_number}/merge")
async def _merge(api: Api, w: World) -> None:
    merged = await api.call("PUT /repos/{owner}/{repo}/pulls/{pull_number}/merge", 200,
                            pull_number=w.number, json={"sha": w.head, "merge_method": "squash"})
    assert merged["merged"] is True


@case("PUT /repos/{owner}/{repo}/pulls/{pull_number}/update-branch")
async def _update_branch(api: Api, w: World) -> None:
    await w.sim.push(REPO, "main", {"docs/guide.md": "# The guide\n"})  # the PR falls behind
    await api.call("PUT /repos/{owner}/{repo}/pulls/{pull_number}/update-branch", 202,
                   pull_number=w.number, json={"expected_head_sha": w.head})
    assert await w.sim.head_sha(w.sim.repo(REPO), w.sim.pr(REPO, w.number)[1]) != w.head


@case("GET /repos/{owner}/{repo}/contents/{path}")
async def _contents(api: Api, w: World) -> None:
    operation = "GET /repos/{owner}/{repo}/contents/{path}"
    file = await api.call(operation, 200, path="app.py", params={"ref": "feature"})
    assert file["type"] == "file" and file["encoding"] == "base64"
    listing = await api.call(operation, 200, path="docs")
    assert [e["name"] for e in listing] == ["guide.md"]


@case("GET /rate_limit")
async def _rate_limit(api: Api, w: World) -> None:
    limits = await api.call("GET /rate_limit", 200)
    assert limits["rate"] == limits["resources"]["core"]


@case("GET /repos/{owner}/{repo}/issues/comments")
async def _list_repo_issue_comments(api: Api, w: World) -> None:
    comments = await api.call("GET /repos/{owner}/{repo}/issues/comments", 200,
                              params={"since": "2020-01-01T00:00:00Z", "sort": "updated", "direction": "asc"})
    assert [c["id"] for c in comments] == [w.issue_comment_id]
    assert f"/pull/{w.number}#issuecomment-" in comments[0]["html_url"]


@case("GET /repos/{owner}/{repo}/pulls/comments")
async def _list_repo_review_comments(api: Api, w: World) -> None:
    comments = await api.call("GET /repos/{owner}/{repo}/pulls/comments", 200,
                              params={"since": "2020-01-01T00:00:00Z", "sort": "updated", "direction": "asc"})
    assert [c["id"] for c in comments][0] == w.review_comment_id and len(comments) == 2


@case("GET /installation/repositories")
async def _installation_repositories(api: Api, w: World) -> None:
    listed = await api.call("GET /installation/repositories", 200)
    assert [r["full_name"] for r in listed["repositories"]] == [REPO] and listed["total_count"] == 1


@case("GET /repos/{owner}/{repo}/compare/{basehead}")
async def _compare(api: Api, w: World) -> None:
    await w.sim.push(REPO, "main", {"docs/guide.md": "# The guide\n"})  # both sides move
    found = await api.call("GET /repos/{owner}/{repo}/compare/{basehead}", 200,
                           basehead="main...feature")
    assert (found["status"], found["ahead_by"], found["behind_by"]) == ("diverged", 1, 1)
    assert [(f["filename"], f["status"]) for f in found["files"]] == [("app.py", "modified")]


APP_JWT = {"Authorization": "Bearer header.claims.signature"}  # the App's own calls


async def _failed_delivery(w: World) -> int:
    """The log id of a delivery that never reached its hook."""
    w.sim.configure_webhooks("http://127.0.0.1:9/webhook", "s3cret")
    w.sim.webhook_faults(drop_next=1)
    await w.sim.comment(REPO, w.number, "/converge", user="bob")
    return w.sim.webhooks.log.entries[-1].id


@case("GET /app/hook/deliveries")
async def _list_deliveries(api: Api, w: World) -> None:
    entry_id = await _failed_delivery(w)
    log = await api.call("GET /app/hook/deliveries", 200, headers=APP_JWT)
    assert [(e["id"], e["status_code"], e["event"]) for e in log] == [(entry_id, 0, "issue_comment")]


@case("GET /app/hook/deliveries/{delivery_id}")
async def _get_delivery(api: Api, w: World) -> None:
    entry_id = await _failed_delivery(w)
    one = await api.call("GET /app/hook/deliveries/{delivery_id}", 200, headers=APP_JWT,
                         delivery_id=entry_id)
    assert one["request"]["payload"]["comment"]["body"] == "/converge"


@case("POST /app/hook/deliveries/{delivery_id}/attempts")
async def _redeliver(api: Api, w: World) -> None:
    entry_id = await _failed_delivery(w)
    await api.call("POST /app/hook/deliveries/{delivery_id}/attempts", 202, headers=APP_JWT,
                   delivery_id=entry_id)


HOOK = {"hook_id": 1}  # the simulator's one webhook, as a repository's or an organisation's


@case("GET /repos/{owner}/{repo}/hooks/{hook_id}/deliveries")
async def _list_repo_hook_deliveries(api: Api, w: World) -> None:
    entry_id = await _failed_delivery(w)
    log = await api.call("GET /repos/{owner}/{repo}/hooks/{hook_id}/deliveries", 200, **HOOK)
    assert [(e["id"], e["status_code"], e["event"]) for e in log] == [(entry_id, 0, "issue_comment")]


@case("POST /repos/{owner}/{repo}/hooks/{hook_id}/deliveries/{delivery_id}/attempts")
async def _redeliver_repo_hook(api: Api, w: World) -> None:
    entry_id = await _failed_delivery(w)
    await api.call("POST /repos/{owner}/{repo}/hooks/{hook_id}/deliveries/{delivery_id}/attempts", 202,
                   delivery_id=entry_id, **HOOK)


@case("GET /orgs/{org}/hooks/{hook_id}/deliveries")
async def _list_org_hook_deliveries(api: Api, w: World) -> None:
    entry_id = await _failed_delivery(w)
    log = await api.call("GET /orgs/{org}/hooks/{hook_id}/deliveries", 200, org=OWNER, **HOOK)
    assert [(e["id"], e["status_code"], e["event"]) for e in log] == [(entry_id, 0, "issue_comment")]


@case("POST /orgs/{org}/hooks/{hook_id}/deliveries/{delivery_id}/attempts")
async def _redeliver_org_hook(api: Api, w: World) -> None:
    entry_id = await _failed_delivery(w)
    await api.call("POST /orgs/{org}/hooks/{hook_id}/deliveries/{delivery_id}/attempts", 202,
                   org=OWNER, delivery_id=entry_id, **HOOK)


def test_every_operation_of_the_subset_has_a_case():
    assert set(CASES) == set(operation_names())


@pytest.mark.parametrize("operation", operation_names())
async def test_simulator_answers_in_githubs_shape(operation, api, world):
    assert operation in CASES, f"no case exercises {operation}"
    await CASES[operation](api, world)
    assert api.exercised == {operation}


async def test_outdated_review_comments_differ_from_the_spec_only_in_null_line_and_position(
        api, world):
    """GitHub nulls `line` and `position` of an outdated review comment, though its spec types
    both as plain integers (github/rest-api-description#1901); the simulator does as GitHub
    does. Anything else off in the body fails here, and so does a spec that starts allowing
    null: then the outdated case belongs in the list-comments case above."""
    operation = "GET /repos/{owner}/{repo}/pulls/{pull_number}/comments"
    await world.sim.push(REPO, "feature", {"app.py": "x = 4\ny = 2\n"})  # changes line 1
    resp = await api.client.get(f"repos/{REPO}/pulls/{world.number}/comments")
    assert resp.status_code == 200
    errors = Draft202012Validator(schema_for(operation)).iter_errors(resp.json())
    assert sorted((e.json_path, e.instance, e.validator) for e in errors) == [
        (f"$[{i}].{name}", None, "type") for i in (0, 1) for name in ("line", "position")]
