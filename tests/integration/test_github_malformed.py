"""Every read the bot makes of GitHub, answered with what GitHub's API does not document (the
simulator's `rewrite` fault: an HTML page, a body cut short, none at all, fields missing or of
another type, null list items, a file's content not base64): each call returns what GitHub
documents or raises `Malformed`, with one log line; no other exception leaves the client."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from structlog.testing import capture_logs

from bot.github.client import GitHubClient, open_github
from bot.github.errors import GitHubError, Malformed, Unavailable
from simulator.faults import REWRITES

from ..helpers import app_private_key
from ..simulator_fixtures import WEBHOOK_SECRET

OWNER, NAME = "acme", "lib"
REPO = f"{OWNER}/{NAME}"
CONFIG = ".github/convergebot.toml"
HOOK = "orgs/acme/hooks/1"


@dataclass
class World:
    number: int
    head: str
    comment_id: int
    check_run_id: int


@pytest.fixture
async def world(sim, webhook_receiver) -> World:
    """A PR with something in every answer the bot reads: a label, a review with a thread, a
    requested reviewer, a failed check run with an annotation, a failed status, an issue
    comment, the repository's config file, and webhook deliveries in the log."""
    sim.configure_webhooks(webhook_receiver.url, WEBHOOK_SECRET)
    await sim.create_repo(REPO, files={"app.py": "one\n", CONFIG: "[convergence]\nmax_rounds = 3\n"},
                          collaborators={"maint": "write"})
    pr = await sim.open_pr(REPO, title="Change", head="feat", author="dev", labels=("converge",),
                           files={"app.py": "two\n"})
    await sim.push(REPO, "main", {"app.py": "three\n"})  # both sides changed app.py
    _, found = sim.pr(REPO, pr.number)
    head = await sim.head_sha(sim.repo(REPO), found)
    await sim.submit_review(REPO, pr.number, user="rev", threads=[{"path": "app.py", "line": 1, "body": "fix"}])
    await sim.request_reviewers(REPO, pr.number, ["maint"], actor="dev")
    run = await sim.set_check_run(REPO, head, "ci", conclusion="failure", output={
        "title": "failed", "summary": "one test",
        "annotations": [{"path": "app.py", "start_line": 1, "end_line": 1, "annotation_level": "failure",
                         "message": "boom"}]})
    await sim.set_status(REPO, head, "failure", context="lint")
    comment = await sim.comment(REPO, pr.number, "a comment", user="maint")
    await sim.settle()
    return World(pr.number, head, comment.id, run.id)


Read = Callable[[GitHubClient, World], Awaitable[Any]]
LONG_AGO = datetime.now(UTC) - timedelta(days=1)
GRAPHQL = r"^/graphql$"

# Each read the bot makes: the path its fault is put on (method GET unless named), and the call.
READS: dict[str, tuple[str, str, Read]] = {
    "pull": ("GET", r"/pulls/\d+$", lambda c, w: c.pull(OWNER, NAME, w.number)),
    "open_pulls": ("GET", r"/pulls$", lambda c, w: c.open_pulls(OWNER, NAME)),
    "pulls_by_update": ("GET", r"/pulls$", lambda c, w: c.pulls_by_update(OWNER, NAME, LONG_AGO)),
    "reviews": ("GET", r"/reviews$", lambda c, w: c.reviews(OWNER, NAME, w.number)),
    "requested_reviewers": ("GET", r"/requested_reviewers$",
                            lambda c, w: c.requested_reviewers(OWNER, NAME, w.number)),
    "review_threads": ("POST", GRAPHQL, lambda c, w: c.review_threads(OWNER, NAME, w.number)),
    "review_state": ("POST", GRAPHQL, lambda c, w: c.review_state(OWNER, NAME, w.number, w.head)),
    "required_checks": ("POST", GRAPHQL, lambda c, w: c.required_checks(OWNER, NAME, w.number, w.head)),
    "merge_queue": ("POST", GRAPHQL, lambda c, w: c.merge_queue(OWNER, NAME, w.number)),
    "check_runs": ("GET", r"/check-runs$", lambda c, w: c.check_runs(OWNER, NAME, w.head)),
    "check_run_annotations": ("GET", r"/annotations$",
                              lambda c, w: c.check_run_annotations(OWNER, NAME, w.check_run_id)),
    "combined_status": ("GET", r"/status$", lambda c, w: c.combined_status(OWNER, NAME, w.head)),
    "issue_comments": ("GET", r"/issues/\d+/comments$", lambda c, w: c.issue_comments(OWNER, NAME, w.number)),
    "repo_comments": ("GET", r"/issues/comments$", lambda c, w: c.repo_comments(OWNER, NAME, LONG_AGO)),
    "repo_review_comments": ("GET", r"/pulls/comments$",
                             lambda c, w: c.repo_comments(OWNER, NAME, LONG_AGO, review=True)),
    "comment": ("GET", r"/issues/comments/\d+$", lambda c, w: c.comment(OWNER, NAME, w.comment_id)),
    "file_text": ("GET", r"/contents/", lambda c, w: c.file_text(OWNER, NAME, CONFIG)),
    "branch_head": ("GET", r"/git/ref/", lambda c, w: c.branch_head(OWNER, NAME, "feat")),
    "conflicting_files": ("GET", r"/compare/", lambda c, w: c.conflicting_files(OWNER, NAME, "main", w.head)),
    "can_write": ("GET", r"/permission$", lambda c, w: c.can_write(OWNER, NAME, "maint", fresh=True)),
    "repo": ("GET", r"^/repos/acme/lib$", lambda c, w: c.repo(OWNER, NAME)),
    "installation_repositories": ("GET", r"^/installation/repositories$", lambda c, w: c.installation_repositories()),
    "hook_deliveries": ("GET", r"/deliveries$", lambda c, w: c.hook_deliveries(hook=HOOK)),
    "rate_limit": ("GET", r"^/rate_limit$", lambda c, w: c.rate_limit()),
    # The writes whose answers are read: the id of what they made.
    "comment_once": ("POST", r"/issues/\d+/comments$",
                     lambda c, w: c.comment_once(OWNER, NAME, w.number, f"m{id(c)}", "hello")),
    "create_check_run": ("POST", r"/check-runs$",
                         lambda c, w: c.create_check_run(OWNER, NAME, name="x", head_sha=w.head)),
}

# Each read's entries are checked by its caller, one by one (`bot/intake/redelivery.py`).
ENTRIES_READ_BY_THE_CALLER = {"hook_deliveries"}
# The reads that follow `Link: rel="next"`.
PAGED = {"check_runs", "installation_repositories", "issue_comments", "open_pulls", "reviews", "repo_comments",
         "repo_review_comments"}
# What no read can take for GitHub's answer.
NEVER_READ = ("html", "truncated", "empty")


async def _outcome(sim, client: GitHubClient, world: World, name: str, kind: str) -> str:
    method, path, read = READS[name]
    fault = sim.inject_fault(path, method=method, rewrite=kind, count=1)
    try:
        await read(client, world)
        return "read"
    except Malformed:
        return "malformed"
    except GitHubError as e:
        return f"{type(e).__name__}: {e}"
    finally:
        sim.clear_faults(fault.id)
        assert fault.hits == 1, f"{name}: the fault on {path} was not hit"


@pytest.mark.parametrize("kind", REWRITES)
async def test_every_read_returns_what_github_documents_or_is_malformed(simulator, sim, world, kind):
    outcomes: dict[str, str] = {}
    async with open_github(api_url=simulator.url, token="t", timeout=5, read_timeout=5) as gh:
        client = GitHubClient(gh, call_timeout=10)
        with capture_logs() as logs:
            for name in READS:
                outcomes[name] = await _outcome(sim, client, world, name, kind)
    assert set(outcomes.values()) <= {"read", "malformed"}, outcomes
    malformed = {name for name, outcome in outcomes.items() if outcome == "malformed"}
    said = [line for line in logs if line["event"] == "github.malformed"]
    assert len(said) == len(malformed)  # one line each, naming the request and what is wrong
    assert all(line["request"] and line["why"] and line["log_level"] == "warning" for line in said)
    if kind in NEVER_READ:
        assert malformed == set(READS)
    elif kind == "wrong_types":
        assert malformed == set(READS) - ENTRIES_READ_BY_THE_CALLER
    elif kind == "bad_base64":
        assert malformed == {"file_text"}
    elif kind == "next_loop":
        # A paged read would follow the link back for ever; the others read no Link header.
        assert malformed == PAGED, malformed
    elif kind == "missing":
        # The outermost objects (the answer, a list's items) keep their own fields: the reads of
        # only those fields go on.
        flat = {"file_text", "can_write", "repo", "check_run_annotations", "comment_once", "create_check_run"}
        assert malformed == set(READS) - ENTRIES_READ_BY_THE_CALLER - flat
    else:  # null_nodes: GraphQL's `nodes` may hold nulls, a REST list never
        assert malformed == {"open_pulls", "pulls_by_update", "reviews", "requested_reviewers", "check_runs",
                             "check_run_annotations", "combined_status", "issue_comments", "repo_comments",
                             "repo_review_comments", "installation_repositories", "pull", "conflicting_files"}


async def test_an_html_error_page_with_a_5xx_is_unavailable(simulator, sim, world):
    async with open_github(api_url=simulator.url, token="t", timeout=5, read_timeout=5) as gh:
        client = GitHubClient(gh, call_timeout=10)
        for status in (500, 502, 503):
            sim.inject_fault(r"/pulls/\d+$", status=status, rewrite="html", count=1)
            with pytest.raises(Unavailable, match=f": {status}$"):
                await client.pull(OWNER, NAME, world.number)
        assert (await client.pull(OWNER, NAME, world.number))["number"] == world.number


async def test_a_file_whose_content_is_not_base64_is_malformed_and_the_next_read_is_the_file(simulator, sim, world):
    async with open_github(api_url=simulator.url, token="t", timeout=5, read_timeout=5) as gh:
        client = GitHubClient(gh, call_timeout=10)
        sim.inject_fault(r"/contents/", rewrite="bad_base64", count=1)
        with pytest.raises(Malformed, match="content is not base64"):
            await client.file_text(OWNER, NAME, CONFIG)
        text, _ = await client.file_text(OWNER, NAME, CONFIG)
        assert text == "[convergence]\nmax_rounds = 3\n"


APP_READS: dict[str, tuple[str, str, Read]] = {
    "app_installations": ("GET", r"^/app/installations$", lambda c, w: c.app_installations()),
    "installation_lookup": ("GET", r"/installation$", lambda c, w: c.pull(OWNER, NAME, w.number)),
    "clone_token": ("POST", r"/access_tokens$", lambda c, w: c.clone_token(OWNER, NAME)),
}


@pytest.mark.parametrize("kind", [*NEVER_READ, "wrong_types"])
async def test_the_apps_own_reads_are_malformed_alike(simulator, sim, world, tmp_path, kind):
    pem = app_private_key(tmp_path).read_text()
    for app_id, (name, (method, path, read)) in enumerate(APP_READS.items(), start=91_000 + 10 * REWRITES.index(kind)):
        # Each its own App id: githubkit keeps tokens by App id, and this read must mint its own.
        async with open_github(api_url=simulator.url, app_id=str(app_id), private_key=pem) as gh:
            client = GitHubClient(gh, call_timeout=10)
            if name == "clone_token":
                await client.installation_for(OWNER, NAME)
            fault = sim.inject_fault(path, method=method, rewrite=kind, count=1)
            with pytest.raises(Malformed):
                await read(client, world)
            assert fault.hits == 1, name
            sim.clear_faults()

