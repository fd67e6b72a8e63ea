"""POST /webhook over real HTTP, with GitHub's own example payloads (@octokit/webhooks-examples)."""

from __future__ import annotations

import json
import uuid

import pytest
from githubkit.webhooks import sign
from sqlmodel import select

from storage import jobs
from storage.models import WebhookDelivery

from ..helpers import until
from ..openapi import webhook_examples
from ..serving import WEBHOOK_SECRET, make_config, serving

EVENTS = [
    "pull_request", "pull_request_review", "pull_request_review_comment",
    "pull_request_review_thread", "issue_comment", "check_suite", "check_run", "status", "push",
    "ping", "installation",
]


def signed(body: bytes, event: str, delivery: str | None = None, secret: str = WEBHOOK_SECRET) -> dict:
    return {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        "X-Hub-Signature-256": sign(secret, body, "sha256"),
        "Content-Type": "application/json",
    }


async def _deliveries(db) -> list[WebhookDelivery]:
    async with db.session() as s:
        return list(await s.exec(select(WebhookDelivery)))


async def test_every_github_example_is_accepted_once(db_url):
    async with serving(make_config(db_url)) as (rt, http):
        sent = 0
        for event in EVENTS:
            examples = webhook_examples(event)
            assert examples, event
            for payload in examples:
                body = json.dumps(payload).encode()
                headers = signed(body, event)
                r = await http.post("/webhook", content=body, headers=headers)
                assert r.status_code == 202, (event, payload.get("action"), r.text)
                sent += 1
                # The same delivery again: 200, and nothing is queued or recorded again.
                queued = len(await jobs.list_jobs(rt.db))
                again = await http.post("/webhook", content=body, headers=headers)
                assert again.status_code == 200 and again.json()["outcome"] == "duplicate"
                assert len(await jobs.list_jobs(rt.db)) == queued
        recorded = await _deliveries(rt.db)
        assert len(recorded) == sent >= len(EVENTS)
        assert {d.event for d in recorded} == set(EVENTS)
        # PR events woke a sync job for their PR.
        pr_jobs = [j for j in await jobs.list_jobs(rt.db) if j.kind == "sync"]
        assert pr_jobs and all(j.pr_key and "#" in j.pr_key for j in pr_jobs)
        assert (await http.get("/livez")).status_code == 200


async def test_bad_input_is_refused_and_nothing_is_recorded(db_url):
    async with serving(make_config(db_url)) as (rt, http):
        body = json.dumps(webhook_examples("pull_request")[0]).encode()

        wrong = signed(body, "pull_request", secret="not-the-secret")
        assert (await http.post("/webhook", content=body, headers=wrong)).status_code == 401
        missing = signed(body, "pull_request")
        del missing["X-Hub-Signature-256"]
        assert (await http.post("/webhook", content=body, headers=missing)).status_code == 401
        tampered = signed(body, "pull_request")
        assert (await http.post("/webhook", content=body + b" ", headers=tampered)).status_code == 401

        truncated = body[: len(body) // 2]
        r = await http.post("/webhook", content=truncated, headers=signed(truncated, "pull_request"))
        assert r.status_code == 400 and "malformed JSON" in r.json()["error"]
        not_object = b"[1, 2]"
        assert (await http.post("/webhook", content=not_object,
                                headers=signed(not_object, "push"))).status_code == 400
        no_event = signed(body, "pull_request")
        del no_event["X-GitHub-Event"]
        assert (await http.post("/webhook", content=body, headers=no_event)).status_code == 400
        no_delivery = signed(body, "pull_request")
        del no_delivery["X-GitHub-Delivery"]
        assert (await http.post("/webhook", content=body, headers=no_delivery)).status_code == 400

        huge = b'{"a": "' + b"x" * (25 * 1024 * 1024) + b'"}'
        assert (await http.post("/webhook", content=huge, headers=signed(huge, "push"))).status_code == 413

        assert await _deliveries(rt.db) == []
        assert await jobs.list_jobs(rt.db) == []
        # Still up, and a good delivery still goes through.
        r = await http.post("/webhook", content=body, headers=signed(body, "pull_request"))
        assert r.status_code == 202


async def test_unknown_event_is_recorded_and_ignored(db_url):
    async with serving(make_config(db_url)) as (rt, http):
        body = b'{"action": "created"}'
        r = await http.post("/webhook", content=body, headers=signed(body, "sponsorship", "d-1"))
        assert r.status_code == 202
        assert r.json()["outcome"] == "ignored" and "sponsorship" in r.json()["reason"]
        assert [(d.delivery_id, d.outcome) for d in await _deliveries(rt.db)] == [("d-1", "ignored")]


async def test_without_a_configured_secret_every_webhook_is_refused(db_url):
    config = make_config(db_url, github={"webhook_secret": ""})
    async with serving(config) as (rt, http):
        body = b"{}"
        r = await http.post("/webhook", content=body, headers=signed(body, "ping", secret=""))
        assert r.status_code == 401
        assert await _deliveries(rt.db) == []


@pytest.mark.parametrize("event", ["check_run", "status", "push"])
async def test_ref_events_resolve_to_the_enrolled_pr_at_that_ref(db_url, event):
    from storage import prs

    from ..helpers import enroll

    async with serving(make_config(db_url)) as (rt, http):
        key = "octo/repo#5"
        pk = await enroll(rt.db, key)
        await prs.fenced_update(rt.db, key, pk, {"head_sha": "a" * 40, "head_branch": "feature"})
        payload = {
            "check_run": {"check_run": {"head_sha": "a" * 40, "pull_requests": []}},
            "status": {"sha": "a" * 40, "state": "success"},
            "push": {"ref": "refs/heads/feature", "after": "b" * 40},
        }[event] | {"repository": {"full_name": "Octo/Repo"}}
        body = json.dumps(payload).encode()
        assert (await http.post("/webhook", content=body, headers=signed(body, event))).status_code == 202
        # The sync_ref job runs (no GitHub needed) and queues a sync for the PR at that ref.
        async def synced() -> bool:
            return any(j.kind == "sync" and j.pr_key == key for j in await jobs.list_jobs(rt.db))

        await until("a sync of the PR at that ref", synced)
