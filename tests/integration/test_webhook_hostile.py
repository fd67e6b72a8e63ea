"""Signed but malformed deliveries to POST /webhook, over real HTTP, on both backends (issue 11).

Each used to answer 500 (or, for a check naming 20,000 PRs, to queue 20,000 jobs in one
transaction). Now each is answered 400 with nothing recorded, or recorded and ignored, or routed
without the field it could not read; never a 5xx. Each table row is one case of the issue.
"""

from __future__ import annotations

import json
import uuid

import structlog
from sqlmodel import select

from bot.intake.webhook import intake
from storage import jobs
from storage.models import Job, WebhookDelivery

from ..helpers import polled, until
from ..hostile import nested
from ..serving import make_config, serving
from .test_webhooks import signed

REPO = {"repository": {"full_name": "octo/repo"}}
PR = REPO | {"action": "opened", "pull_request": {"number": 7, "user": {"login": "dev"}}}


def _body(payload: dict) -> bytes:
    return json.dumps(payload).encode()


async def _delivery(db, delivery_id: str) -> WebhookDelivery | None:
    async with db.session() as s:
        return await s.get(WebhookDelivery, delivery_id)


async def _job_ids(db) -> set[int]:
    return {j.id for j in await jobs.list_jobs(db)}


async def _jobs_since(db, before: set[int]) -> list[Job]:
    return [j for j in await jobs.list_jobs(db) if j.id not in before]


# (case, event header, body): each answered 400, nothing recorded.
REFUSED = [
    ("JSON nested 10,000 deep in arrays", "pull_request", nested(10_000, "[")),
    ("JSON nested 10,000 deep in objects", "pull_request", nested(10_000, "{")),
    ("an integer of 5,000 digits as the PR number", "pull_request",
     b'{"action": "opened", "pull_request": {"number": ' + b"9" * 5000 + b"}}"),
    ("a lone \\ud800 escape as the action", "pull_request", b'{"action": "\\ud800"}'),
    ("a lone surrogate as raw bytes (not UTF-8)", "pull_request", b'{"action": "\xed\xa0\x80"}'),
    ("a NUL byte in the action", "pull_request", _body(PR | {"action": "open\x00ed"})),
    ("an action over 64 characters", "pull_request", _body(PR | {"action": "a" * 65})),
    ("an action that is no string", "pull_request", _body(PR | {"action": ["opened"]})),
    ("an event over 64 characters", "e" * 65, _body(PR)),
    ("a control character in the event", "pull\trequest", _body(PR)),
]


async def test_signed_deliveries_that_cannot_be_recorded_are_refused_400_and_leave_nothing(db_url):
    async with serving(make_config(db_url)) as (rt, http):
        for case, event, body in REFUSED:
            delivery = str(uuid.uuid4())
            r = await http.post("/webhook", content=body, headers=signed(body, event, delivery))
            assert r.status_code == 400, (case, r.status_code, r.text)
            assert await _delivery(rt.db, delivery) is None, case
        tab = signed(_body(PR), "pull_request", "id\twith a tab")
        r = await http.post("/webhook", content=_body(PR), headers=tab)
        assert r.status_code == 400, ("a control character in the delivery id", r.text)
        async with rt.db.session() as s:
            assert list(await s.exec(select(WebhookDelivery))) == []
        assert await jobs.list_jobs(rt.db) == []
        assert (await http.get("/livez")).status_code == 200


# (case, event, payload, the kinds of job it queues): each recorded, with what could be read.
# Each PR is another: a second sync of a PR coalesces into the one already queued.
RECORDED = [
    ("repository.full_name a number", "pull_request", PR | {"repository": {"full_name": 5}}, []),
    ("repository.full_name a list", "status", {"sha": "a" * 40, "repository": {"full_name": ["o/r"]}}, []),
    ("repository.full_name a lone surrogate", "push",
     {"ref": "refs/heads/main", "repository": {"full_name": "octo/\ud800"}}, []),
    ("repository.full_name with a NUL", "status", {"sha": "a" * 40, "repository": {"full_name": "o/r\x00"}}, []),
    ("a job key over 300 characters (a 400-character repository)", "status",
     {"sha": "a" * 40, "repository": {"full_name": "o/" + "r" * 400}}, []),
    ("pull_request.user a string", "pull_request", PR | {"pull_request": {"number": 7, "user": "alice"}},
     ["sync"]),
    ("pull_request.user.login a number", "pull_request",
     PR | {"pull_request": {"number": 8, "user": {"login": 5}}}, ["sync"]),
    ("sender.login a number", "pull_request", PR | {"action": "review_requested", "pull_request": {"number": 9}, "sender": {"login": 5}},
     ["sync"]),
    ("check_suite.app.slug a number", "check_suite",
     REPO | {"check_suite": {"app": {"slug": 5}, "head_sha": "a" * 40, "pull_requests": [{"number": 10}]}},
     ["sync"]),
    ("a branch with a lone surrogate", "push", REPO | {"ref": "refs/heads/\ud800"}, []),
    ("a comment id past BIGINT", "issue_comment",
     REPO | {"action": "created", "issue": {"number": 7, "pull_request": {}},
             "comment": {"id": 10**30, "body": "/converge stop", "user": {"login": "m"}}}, []),
    ("a lone surrogate in a command's body (not stored)", "issue_comment",
     REPO | {"action": "created", "issue": {"number": 7, "pull_request": {"url": "x"}},
             "comment": {"id": 91, "body": "/converge stop \ud800", "user": {"login": "m"}}}, ["command"]),
    ("an unknown event named in Latin-1", "pull_r\u00e9quest", PR, []),
]


async def test_signed_payloads_with_unreadable_fields_are_recorded_with_what_could_be_read(db_url):
    config = make_config(db_url, convergence={"auto_enroll_authors": ["alice"]},
                         jobs={"workers": 1, "idle_poll_seconds": 3600})
    async with serving(config) as (rt, http):
        for case, event, payload, kinds in RECORDED:
            delivery, body, before = str(uuid.uuid4()), _body(payload), await _job_ids(rt.db)
            headers = signed(body, event, delivery) | {"X-GitHub-Event": event.encode("latin-1")}
            r = await http.post("/webhook", content=body, headers=headers)
            assert r.status_code == 202, (case, r.status_code, r.text)
            assert r.json()["outcome"] == ("queued" if kinds else "ignored"), (case, r.json())
            row = await _delivery(rt.db, delivery)
            assert row is not None and (row.event, row.action, row.error) == (
                event, payload.get("action"), None), case
            assert sorted(j.kind for j in await _jobs_since(rt.db, before)) == kinds, case


def _check_run(numbers) -> dict:
    return REPO | {"action": "completed", "check_run": {
        "name": "ci", "head_sha": "c" * 40, "pull_requests": [{"number": n} for n in numbers]}}


async def test_a_check_run_naming_20000_prs_queues_one_job_for_its_head_sha(db_url):
    config = make_config(db_url, jobs={"workers": 1, "idle_poll_seconds": 3600})
    assert config.webhooks.max_prs_per_delivery == 100
    async with serving(config) as (rt, http):
        # No worker takes the first sync_ref before the second delivery could coalesce into it
        # (it falls due within a fraction of a second, and a loaded machine is slower): the
        # poller's start-up tick wakes the workers once, and then the intake would.
        await until("the poller's start-up tick", lambda: polled(rt))
        intake(rt).wake = lambda _delay: None
        queued = {}
        for case, numbers in (("20,000", range(1, 20_001)), ("101", range(1, 102)), ("100", range(1, 101))):
            body, before = _body(_check_run(numbers)), await _job_ids(rt.db)
            r = await http.post("/webhook", content=body, headers=signed(body, "check_run"))
            assert r.status_code == 202 and r.json()["outcome"] == "queued", (case, r.text)
            queued[case] = await _jobs_since(rt.db, before)
        (job,) = queued["20,000"]
        assert (job.kind, json.loads(job.payload)) == (
            "sync_ref", {"repo": "octo/repo", "sha": "c" * 40, "branch": None})
        # Past the cap again, for the same sha: its sync_ref coalesces into the one still queued.
        assert queued["101"] == []
        # At the cap, each PR named is synced.
        assert sorted(j.pr_key for j in queued["100"]) == sorted(f"octo/repo#{n}" for n in range(1, 101))


async def test_a_webhook_log_line_names_its_github_event(db_url):
    body = _body(PR)
    async with serving(make_config(db_url)) as (_, http):
        with structlog.testing.capture_logs() as logs:
            r = await http.post("/webhook", content=body, headers=signed(body, "pull_request", "logged"))
            assert r.status_code == 202
    (line,) = [entry for entry in logs if entry.get("delivery_id") == "logged"]
    assert (line["event"], line["github_event"], line["action"]) == ("webhook.accepted", "pull_request", "opened")


async def test_an_integer_of_5000_digits_in_a_field_no_reader_uses_is_skipped_and_the_delivery_routed(db_url):
    """Only the fields some reader uses are parsed (`bot/intake/webhook.py` `parse_read`): a huge
    integer elsewhere is skipped with the rest of what is not read, and the PR is synced."""
    body = (b'{"action": "opened", "repository": {"full_name": "octo/repo"}, "pull_request": '
            b'{"number": 7, "n": ' + b"9" * 5000 + b"}}")
    async with serving(make_config(db_url, jobs={"workers": 1, "idle_poll_seconds": 3600})) as (rt, http):
        delivery = str(uuid.uuid4())
        r = await http.post("/webhook", content=body, headers=signed(body, "pull_request", delivery))
        assert (r.status_code, r.json()["outcome"]) == (202, "queued"), r.text
        assert (await _delivery(rt.db, delivery)).action == "opened"
        assert [(j.kind, j.pr_key) for j in await jobs.list_jobs(rt.db)] == [("sync", "octo/repo#7")]
