"""Webhook delivery: signed, asynchronous, recorded; and the delivery faults."""

from __future__ import annotations

import time

import pytest
from githubkit.webhooks import verify

from tests.simulator_fixtures import WEBHOOK_SECRET

REPO = "acme/widgets"


@pytest.fixture
async def pr(sim, webhook_receiver):
    await sim.create_repo(REPO, collaborators={"bob": "write"})
    pr = await sim.open_pr(REPO, title="T", head="h", files={"a.txt": "a"}, author="alice")
    sim.configure_webhooks(webhook_receiver.url, WEBHOOK_SECRET)
    return pr


async def _comment(sim, pr, n: int):
    for i in range(n):
        await sim.comment(REPO, pr.number, f"c{i}", user="bob")


def _bodies(received) -> list[str]:
    return [r.payload["comment"]["body"] for r in received]


async def test_issue_comment_delivery_is_signed_and_shaped(sim, pr, webhook_receiver):
    comment = await sim.comment(REPO, pr.number, "/converge", user="bob")
    [got] = await webhook_receiver.wait_for("issue_comment", "created")
    assert verify(WEBHOOK_SECRET, got.body, got.signature)
    assert got.headers["content-type"] == "application/json"
    payload = got.payload
    assert payload["comment"]["id"] == comment.id
    assert payload["comment"]["user"] == {**payload["comment"]["user"], "login": "bob",
                                          "type": "User"}
    assert payload["issue"]["number"] == pr.number and "pull_request" in payload["issue"]
    assert payload["repository"]["full_name"] == REPO
    assert payload["repository"]["owner"]["login"] == "acme"
    assert payload["sender"]["login"] == "bob"
    await sim.settle()
    [delivery] = sim.webhooks.find("issue_comment")
    assert (delivery.id, delivery.status) == (got.delivery, 202)


async def test_edit_and_delete_are_their_own_actions(sim, pr, webhook_receiver):
    c = await sim.comment(REPO, pr.number, "one", user="bob")
    await sim.edit_comment(REPO, c.id, "two")
    await sim.delete_comment(REPO, c.id)
    got = await webhook_receiver.wait_for("issue_comment", count=3)
    assert [r.action for r in got] == ["created", "edited", "deleted"]
    assert got[1].payload["changes"] == {"body": {"from": "one"}}


async def test_drop_next_loses_exactly_that_many(sim, pr, webhook_receiver):
    sim.webhook_faults(drop_next=2)
    await _comment(sim, pr, 3)
    await sim.settle()
    assert _bodies(webhook_receiver.events("issue_comment")) == ["c2"]
    assert [d.dropped for d in sim.webhooks.find("issue_comment")] == [True, True, False]


async def test_drop_all_until_lifted(sim, pr, webhook_receiver):
    sim.webhook_faults(drop_all=True)
    await _comment(sim, pr, 2)
    sim.webhook_faults(drop_all=False)
    await _comment(sim, pr, 1)
    await sim.settle()
    assert _bodies(webhook_receiver.events("issue_comment")) == ["c0"]


async def test_duplicate_sends_the_same_delivery_id_twice(sim, pr, webhook_receiver):
    sim.webhook_faults(duplicate_next=1)
    await _comment(sim, pr, 2)
    await sim.settle()
    got = webhook_receiver.events("issue_comment")
    assert _bodies(got) == ["c0", "c0", "c1"]
    assert got[0].delivery == got[1].delivery != got[2].delivery
    assert got[0].body == got[1].body


async def test_reorder_delivers_a_batch_newest_first(sim, pr, webhook_receiver):
    sim.webhook_faults(reorder_next=3)
    await _comment(sim, pr, 4)
    await sim.settle()
    assert _bodies(webhook_receiver.events("issue_comment")) == ["c2", "c1", "c0", "c3"]


async def test_partial_reorder_batch_is_flushed_after_its_window(sim, pr, webhook_receiver):
    sim.webhook_faults(reorder_next=5, reorder_window=0.2)
    await _comment(sim, pr, 2)
    got = await webhook_receiver.wait_for("issue_comment", count=2, timeout=3)
    assert _bodies(got) == ["c1", "c0"]


async def test_delay_holds_deliveries_but_not_the_request(sim, pr, webhook_receiver):
    sim.webhook_faults(delay=0.3)
    started = time.monotonic()
    await sim.comment(REPO, pr.number, "slow", user="bob")
    # The write returned before its delivery was sent, however long either took.
    assert [d.attempts for d in sim.webhooks.find("issue_comment")] == [[]]
    await webhook_receiver.wait_for("issue_comment", timeout=3)
    assert time.monotonic() - started >= 0.3  # a slow machine only makes it later


async def test_failed_receiver_is_recorded_and_later_deliveries_go_on(sim, pr,
                                                                    webhook_receiver):
    webhook_receiver.status = 500
    await _comment(sim, pr, 1)
    await sim.settle()
    webhook_receiver.status = 202
    await _comment(sim, pr, 1)
    await sim.settle()
    assert [d.status for d in sim.webhooks.find("issue_comment")] == [500, 202]


async def test_review_flow_events(sim, pr, webhook_receiver):
    await sim.request_reviewers(REPO, pr.number, ["carol"], actor="alice")
    review = await sim.submit_review(REPO, pr.number, user="carol", body="two things",
                                     threads=[{"path": "a.txt", "line": 1, "body": "why?"}])
    thread = sim.state.threads[sim.pr(REPO, pr.number)[1].thread_ids[0]]
    await sim.resolve_thread(thread.node_id, user="alice")
    await sim.settle()
    events = [(r.event, r.action) for r in webhook_receiver.received]
    assert events == [("pull_request", "review_requested"),
                      ("pull_request_review_comment", "created"),
                      ("pull_request_review", "submitted"),
                      ("pull_request_review_thread", "resolved")]
    submitted = webhook_receiver.events("pull_request_review")[0].payload
    assert submitted["review"]["id"] == review.id
    assert submitted["review"]["commit_id"] == review.commit_id
    requested = webhook_receiver.events("pull_request", "review_requested")[0].payload
    assert requested["requested_reviewer"]["login"] == "carol"


async def test_check_run_completion_sends_run_and_suite_events(sim, pr, webhook_receiver):
    await sim.set_check_run(REPO, "h", "ci", status="in_progress", conclusion=None)
    await sim.set_check_run(REPO, "h", "ci", status="completed", conclusion="failure")
    await sim.set_status(REPO, "h", "success", context="legacy")
    await sim.settle()
    events = [(r.event, r.action) for r in webhook_receiver.received]
    assert events == [("check_run", "created"), ("check_run", "completed"),
                      ("check_suite", "completed"), ("status", None)]
    suite = webhook_receiver.events("check_suite")[0].payload["check_suite"]
    assert suite["conclusion"] == "failure"
    assert suite["pull_requests"][0]["number"] == pr.number
