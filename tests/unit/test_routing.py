import dataclasses

import pytest

from bot.intake.routing import EnrollRules, Wake, route
from bot.runtime.context import OwnPushes
from storage.keys import parse_pr_key
from storage.statuses import SameWork

from ..openapi import webhook_examples


def test_pull_request_events_wake_a_sync_of_that_pr():
    payload = {"action": "synchronize", "pull_request": {"number": 7}, "repository": {"full_name": "Octo/Repo"}}
    routed = route("pull_request", payload, "d1")
    assert routed.outcome == "queued"
    assert [(w.kind, w.pr_key, w.key) for w in routed.wakes] == [("sync", "octo/repo#7", "sync:octo/repo#7:d1")]


def test_a_command_comment_on_a_pr_becomes_a_command_job():
    base = {"action": "created", "repository": {"full_name": "o/r"}}
    comment = {"id": 55, "body": "/converge stop", "user": {"login": "m", "type": "User"}}
    assert route("issue_comment", base | {"issue": {"number": 3}, "comment": comment}, "d").outcome == "ignored"
    on_pr = base | {"issue": {"number": 3, "pull_request": {"url": "x"}}, "comment": comment}
    (wake,) = route("issue_comment", on_pr, "d").wakes
    assert (wake.kind, wake.key, wake.pr_key, wake.payload) == (
        "command", "cmd:55", "o/r#3", {"comment_id": 55, "kind": "issue", "comment": {
            "body": "/converge stop", "user": {"login": "m", "type": "User"},
            "created_at": None, "updated_at": None}})
    # A comment too long to keep in the job is left for the job to read.
    long = comment | {"body": "/converge stop " + "x" * 4000}
    (wake,) = route("issue_comment", on_pr | {"comment": long}, "d").wakes
    assert wake.payload == {"comment_id": 55, "kind": "issue"}


@pytest.mark.parametrize("change", [
    {"action": "edited"}, {"action": "deleted"},
    {"comment": {"id": 55, "body": "/converge stop", "user": {"login": "ci[bot]", "type": "Bot"}}},
    {"comment": {"id": 55, "body": "looks good", "user": {"login": "m", "type": "User"}}},
])
def test_edited_deleted_bot_and_plain_comments_are_not_commands(change):
    payload = {"action": "created", "repository": {"full_name": "o/r"},
               "issue": {"number": 3, "pull_request": {}},
               "comment": {"id": 55, "body": "/converge stop", "user": {"login": "m", "type": "User"}}} | change
    assert route("issue_comment", payload, "d").wakes == ()


def test_label_and_listed_author_enroll():
    from bot.intake.routing import EnrollRules

    rules = EnrollRules("converge", frozenset({"agent[bot]"}))
    labeled = {"action": "labeled", "label": {"name": "converge"}, "pull_request": {"number": 4},
               "repository": {"full_name": "o/r"}}
    assert [w.kind for w in route("pull_request", labeled, "d", rules).wakes] == ["sync", "enroll"]
    other = labeled | {"label": {"name": "bug"}}
    assert [w.kind for w in route("pull_request", other, "d", rules).wakes] == ["sync"]
    opened = {"action": "opened", "pull_request": {"number": 4, "user": {"login": "Agent[bot]"}},
              "repository": {"full_name": "o/r"}}
    assert [w.kind for w in route("pull_request", opened, "d", rules).wakes] == ["sync", "enroll"]


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


BOT = "convergebot[bot]"
RULES = EnrollRules(bot_login=BOT)
PR = {"pull_request": {"number": 7}, "repository": {"full_name": "o/r"}}


@pytest.mark.parametrize(("event", "payload"), [
    ("pull_request_review_comment", PR | {"action": "created", "sender": {"login": BOT}}),
    ("pull_request_review_thread", PR | {"action": "resolved", "sender": {"login": "ConvergeBot[bot]"}}),
    ("pull_request_review", PR | {"action": "submitted", "sender": {"login": BOT}}),
    ("pull_request", PR | {"action": "review_requested", "sender": {"login": BOT}}),
    ("check_run", {"action": "completed", "repository": {"full_name": "o/r"},
                   "check_run": {"name": "convergebot", "head_sha": "a" * 40, "pull_requests": [{"number": 7}]}}),
    ("check_suite", {"action": "completed", "repository": {"full_name": "o/r"},
                     "check_suite": {"app": {"slug": "convergebot"}, "head_sha": "a" * 40,
                                     "pull_requests": [{"number": 7}]}}),
])
def test_echoes_of_our_own_writes_wake_nothing(event, payload):
    routed = route(event, payload, "d1", RULES)
    assert (routed.outcome, routed.wakes) == ("ignored", ())
    assert "our own" in routed.reason
    # The same event from someone else is news.
    if "sender" in payload:
        assert route(event, payload | {"sender": {"login": "maint"}}, "d1", RULES).outcome == "queued"


def test_our_own_comment_as_a_token_user_is_an_echo_though_it_quotes_a_command():
    """With a token the bot comments as a plain user: its escalation relaying a reviewer's
    `/converge stop` would otherwise queue a command job (the handler refuses our login; the
    job is spared), while the same comment by a maintainer is a command."""
    rules = EnrollRules(bot_login="convergebot-user")
    comment = {"id": 5, "body": "/converge stop", "user": {"login": "Convergebot-User", "type": "User"}}
    payload = {"action": "created", "repository": {"full_name": "o/r"},
               "issue": {"number": 7, "pull_request": {"url": "u"}}, "comment": comment,
               "sender": {"login": "Convergebot-User"}}
    routed = route("issue_comment", payload, "d1", rules)
    assert (routed.outcome, routed.wakes) == ("ignored", ())
    assert routed.reason == "issue_comment created: our own comment"
    theirs = payload | {"sender": {"login": "maint"}, "comment": comment | {"user": {"login": "maint", "type": "User"}}}
    assert [w.kind for w in route("issue_comment", theirs, "d1", rules).wakes] == ["command"]


@pytest.mark.parametrize("action", ["synchronize", "closed"])
def test_our_push_and_our_merge_are_still_news(action):
    payload = PR | {"action": action, "sender": {"login": BOT}}
    assert route("pull_request", payload, "d1", RULES).outcome == "queued"


def test_the_push_of_a_head_our_fixer_pushed_wakes_nothing():
    ours = OwnPushes()
    ours.add("O/R", "a" * 40)
    rules = EnrollRules(bot_login=BOT, own_pushes=ours)
    sync = PR | {"action": "synchronize", "sender": {"login": "dev"}}
    push = {"ref": "refs/heads/feat", "repository": {"full_name": "o/r"}, "sender": {"login": "dev"}}
    for event, payload in (("pull_request", sync | {"pull_request": {"number": 7, "head": {"sha": "a" * 40}}}),
                           ("push", push | {"after": "a" * 40})):
        routed = route(event, payload, "d1", rules)
        assert (routed.outcome, routed.wakes) == ("ignored", ()) and "our fixer's push" in routed.reason
    # Another head, or the same head in another repository, is news.
    assert route("pull_request", sync | {"pull_request": {"number": 7, "head": {"sha": "b" * 40}}},
                 "d1", rules).outcome == "queued"
    assert route("push", push | {"after": "a" * 40, "repository": {"full_name": "o/other"}},
                 "d1", rules).outcome == "queued"


def test_own_pushes_forget_the_oldest_beyond_their_size():
    ours = OwnPushes(size=2)
    for sha in ("a", "b", "c"):
        ours.add("o/r", sha * 40)
    assert ("o/r", "a" * 40) not in ours and ("o/r", "b" * 40) in ours and ("o/r", "c" * 40) in ours


def test_another_app_s_check_run_is_news():
    payload = {"action": "completed", "repository": {"full_name": "o/r"},
               "check_run": {"name": "ci", "app": {"slug": "github-actions"}, "pull_requests": [{"number": 7}]}}
    assert route("check_run", payload, "d1", RULES).outcome == "queued"


def test_a_pr_s_webhook_sync_waits_for_the_rest_of_its_burst():
    (wake,) = route("pull_request", PR | {"action": "edited"}, "d1", RULES).wakes
    assert wake.kind == "sync" and wake.delay_seconds > 0


def test_a_wake_s_job_is_every_field_of_it_and_how_its_kind_coalesces():
    wake = Wake("sync_ref", "sync_ref:o/r:d1", None, {"repo": "o/r", "sha": "abc"}, 0.5)
    assert wake.job() == dataclasses.asdict(wake) | {"same_as": SameWork.PAYLOAD}
    assert Wake("sync", "sync:o/r#1:d1", parse_pr_key("o/r#1")).job()["same_as"] == SameWork.PR
    assert Wake("enroll", "enroll:o/r#1:d1", parse_pr_key("o/r#1")).job()["same_as"] is None


GROUP_REF = "refs/heads/gh-readonly-queue/release/v2/pr-42-" + "b" * 40


@pytest.mark.parametrize("action", ["checks_requested", "destroyed"])
def test_a_merge_group_wakes_a_sync_of_the_pr_its_branch_names(action):
    # Sent by the queue on our enqueue's behalf, it is still news: built, merged or removed.
    payload = {"action": action, "repository": {"full_name": "o/r"}, "sender": {"login": BOT},
               "merge_group": {"head_sha": "c" * 40, "head_ref": GROUP_REF, "base_ref": "refs/heads/release/v2"}}
    routed = route("merge_group", payload, "d1", RULES)
    assert [(w.kind, w.pr_key) for w in routed.wakes] == [("sync", "o/r#42")]


@pytest.mark.parametrize("head_ref", [None, 7, "refs/heads/main", "gh-readonly-queue/main/pr-x-" + "b" * 40,
                                      "gh-readonly-queue/main/pr-0-" + "b" * 40, "gh-readonly-queue/pr-3-" + "b" * 40])
def test_a_merge_group_whose_branch_names_no_pr_is_ignored(head_ref):
    payload = {"action": "destroyed", "repository": {"full_name": "o/r"}, "merge_group": {"head_ref": head_ref}}
    assert route("merge_group", payload, "d1").outcome == "ignored"


def test_our_enqueue_s_pull_request_event_is_an_echo_and_a_dequeue_is_news():
    assert route("pull_request", PR | {"action": "enqueued", "sender": {"login": BOT}}, "d1", RULES).wakes == ()
    routed = route("pull_request", PR | {"action": "dequeued", "reason": "CI_FAILURE", "sender": {"login": BOT}},
                   "d1", RULES)
    assert [w.pr_key for w in routed.wakes] == ["o/r#7"]
