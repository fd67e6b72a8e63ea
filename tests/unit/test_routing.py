import pytest

from bot.webhooks.routing import route

from ..openapi import webhook_examples


def test_pull_request_events_wake_a_sync_of_that_pr():
    payload = {"action": "synchronize", "pull_request": {"number": 7}, "repository": {"full_name": "Octo/Repo"}}
    routed = route("pull_request", payload, "d1")
    assert routed.outcome == "queued"
    assert [(w.kind, w.pr_key, w.key) for w in routed.wakes] == [("sync", "octo/repo#7", "sync:octo/repo#7:d1")]


def test_issue_comment_on_an_issue_is_ignored_and_on_a_pr_is_routed():
    base = {"action": "created", "repository": {"full_name": "o/r"}}
    assert route("issue_comment", base | {"issue": {"number": 3}}, "d").outcome == "ignored"
    routed = route("issue_comment", base | {"issue": {"number": 3, "pull_request": {"url": "x"}}}, "d")
    assert [w.pr_key for w in routed.wakes] == ["o/r#3"]


@pytest.mark.parametrize("payload", [
    {}, {"pull_request": None}, {"pull_request": {"number": "7"}}, {"pull_request": {"number": True}},
    {"pull_request": {"number": 7}, "repository": {"full_name": "not a repo"}},
    {"pull_request": {"number": 7}, "repository": "o/r"},
])
def test_malformed_payloads_never_raise(payload):
    assert route("pull_request", payload, "d").outcome == "ignored"


def test_check_run_without_prs_falls_back_to_its_sha():
    payload = {"check_run": {"head_sha": "abc", "pull_requests": []}, "repository": {"full_name": "O/R"}}
    (wake,) = route("check_run", payload, "d").wakes
    assert (wake.kind, wake.payload) == ("sync_ref", {"repo": "o/r", "sha": "abc", "branch": None})


def test_push_to_a_tag_is_ignored():
    assert route("push", {"ref": "refs/tags/v1", "repository": {"full_name": "o/r"}}, "d").outcome == "ignored"


def test_unknown_event_is_ignored_with_a_reason():
    routed = route("sponsorship", {}, "d")
    assert routed.outcome == "ignored" and "sponsorship" in routed.reason


@pytest.mark.parametrize("event", ["pull_request", "pull_request_review", "pull_request_review_comment",
                                   "pull_request_review_thread", "check_run", "check_suite", "status", "push"])
def test_every_github_example_routes_without_error(event):
    for payload in webhook_examples(event):
        routed = route(event, payload, "d")
        assert routed.outcome in ("queued", "ignored")
        if event.startswith("pull_request"):
            assert routed.outcome == "queued" and routed.wakes[0].pr_key.endswith(
                f"#{payload['pull_request']['number']}")
