"""The client's review-thread reader on answers GitHub may send: null nodes in `nodes` lists."""

from __future__ import annotations

import json

import httpx
from githubkit import GitHub

from bot.engine.read import thread_of
from bot.github.client import GitHubClient


def answering(pages: list[dict]) -> tuple[GitHubClient, list[dict]]:
    """A client whose GraphQL requests get `pages` (each a `data` payload) in turn, and the
    variables each request was sent with."""
    sent: list[dict] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content)["variables"])
        return httpx.Response(200, json={"data": pages[len(sent) - 1]})

    gh = GitHub("t", base_url="https://github.test/api", async_transport=httpx.MockTransport(answer),
                auto_retry=False)
    return GitHubClient(gh), sent


def page(nodes: list[dict | None] | None, after: str | None = None) -> dict:
    return {"repository": {"pullRequest": {"reviewThreads": {
        "pageInfo": {"hasNextPage": after is not None, "endCursor": after}, "nodes": nodes}}}}


def thread(thread_id: str, comments: list[dict | None]) -> dict:
    return {"id": thread_id, "isResolved": False, "isOutdated": False, "path": "a.py", "line": 1,
            "comments": {"nodes": comments}}


async def test_null_threads_are_skipped_on_every_page():
    question = {"fullDatabaseId": "4294967296", "body": "why?", "author": None}
    client, sent = answering([page([None, thread("T1", [question])], after="c1"),
                              page([thread("T2", [None]), None])])
    threads = await client.review_threads("o", "r", 1)
    assert [t["id"] for t in threads] == ["T1", "T2"]
    assert [v["after"] for v in sent] == [None, "c1"]
    first, second = (thread_of(t) for t in threads)
    assert (first.comment_id, first.author, first.body) == (2**32, "ghost", "why?")
    assert (second.comment_id, second.body) == (None, "")


async def test_a_null_nodes_list_is_no_threads():
    client, _ = answering([page(None)])
    assert await client.review_threads("o", "r", 1) == []


async def test_a_fresh_reviews_read_skips_null_threads_and_null_check_contexts():
    rollup = {"statusCheckRollup": {"contexts": {"pageInfo": {"hasNextPage": False}, "nodes": [
        None, {"__typename": "CheckRun", "name": "ci", "status": "COMPLETED", "conclusion": "SUCCESS",
               "checkSuite": None},
        {"__typename": "StatusContext", "context": "lint", "state": "PENDING"}]}}}
    data = page([None, thread("T1", [{"fullDatabaseId": "7", "body": "b", "author": {"login": "x"}}])])
    data["repository"]["object"] = rollup
    client, _ = answering([data])
    threads, runs, status = await client.review_state("o", "r", 1, "a" * 40)
    assert [t["id"] for t in threads] == ["T1"]
    assert [(r["name"], r["status"], r["conclusion"]) for r in runs] == [("ci", "completed", "success")]
    assert status == {"statuses": [{"context": "lint", "state": "pending"}]}
