"""The routing reads a hostile payload without an exception, and what it queues is storable.

The cases of issue 11 one by one, then hypothesis over every routed event: GitHub's examples with
the fields the routing reads replaced by values of any type and text no database takes.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.intake.routing import EnrollRules, route, storable
from storage.keys import parse_pr_key

from ..hostile import EVENTS, FUZZ, payloads

RULES = EnrollRules("converge", frozenset({"alice"}), bot_login="convergebot[bot]", max_prs=100)
PR = {"action": "opened", "pull_request": {"number": 7}, "repository": {"full_name": "o/r"}}


def kinds(event: str, payload: dict, rules: EnrollRules = RULES) -> list[str]:
    return [w.kind for w in route(event, payload, "d1", rules).wakes]


@pytest.mark.parametrize("full_name", [5, ["o/r"], {"o": "r"}, None, True, "o/\ud800", "o/r\x00",
                                       "o/" + "r" * 400, "not a repo"])
def test_a_repository_name_that_is_no_owner_repo_routes_to_nothing(full_name):
    for event, payload in (("pull_request", PR), ("status", {"sha": "a" * 40}),
                           ("push", {"ref": "refs/heads/main"}),
                           ("check_run", {"check_run": {"head_sha": "a" * 40, "pull_requests": [{"number": 1}]}})):
        routed = route(event, payload | {"repository": {"full_name": full_name}}, "d1", RULES)
        assert (routed.outcome, routed.wakes) == ("ignored", ()), (event, routed)


@pytest.mark.parametrize("user", ["alice", 5, ["alice"], {"login": 5}, {"login": ["alice"]},
                                  {"login": "\ud800"}])
def test_a_pr_author_that_is_no_user_object_syncs_but_never_enrolls(user):
    assert kinds("pull_request", PR | {"pull_request": {"number": 7, "user": user}}) == ["sync"]
    assert kinds("pull_request", PR | {"pull_request": {"number": 7, "user": {"login": "Alice"}}}) == [
        "sync", "enroll"]


@pytest.mark.parametrize("sender", ["convergebot[bot]", 5, {"login": 5}, {"login": None}])
def test_a_sender_that_is_no_user_object_is_nobody(sender):
    event = PR | {"action": "review_requested", "sender": sender}
    assert kinds("pull_request", event) == ["sync"]


@pytest.mark.parametrize("slug", [5, ["convergebot"], None])
def test_a_check_s_app_slug_that_is_no_string_is_not_ours(slug):
    payload = {"repository": {"full_name": "o/r"},
               "check_suite": {"app": {"slug": slug}, "head_sha": "a" * 40, "pull_requests": [{"number": 7}]}}
    assert kinds("check_suite", payload) == ["sync"]


@pytest.mark.parametrize("comment_id", [0, -5, True, 2**63, 10**300, "55", 5.0])
def test_a_comment_id_no_bigint_holds_wakes_no_command(comment_id):
    payload = {"action": "created", "repository": {"full_name": "o/r"},
               "issue": {"number": 3, "pull_request": {"url": "x"}},
               "comment": {"id": comment_id, "body": "/converge stop", "user": "m"}}
    assert route("issue_comment", payload, "d1", RULES).wakes == ()
    (wake,) = route("issue_comment", payload | {"comment": payload["comment"] | {"id": 2**63 - 1}}, "d1",
                    RULES).wakes
    assert wake.key == f"cmd:{2**63 - 1}"


@pytest.mark.parametrize("event", ["pull_request", "check_run", "issue_comment"])
def test_a_pr_number_is_keyed_as_parse_pr_key_keys_it(event):
    """The routing builds a PR's key from the repository and number it read; the key must be
    the one `parse_pr_key` makes of `owner/repo#N` (lowercased), and a number it refuses (more
    than ten digits) names no PR."""
    def payload(number: int) -> dict:
        repo = {"repository": {"full_name": "Octo-Org/Hello.World"}}
        if event == "pull_request":
            return repo | {"action": "synchronize", "pull_request": {"number": number}}
        if event == "check_run":
            return repo | {"check_run": {"pull_requests": [{"number": number}]}}
        return repo | {"action": "created", "issue": {"number": number, "pull_request": {"url": "x"}},
                       "comment": {"id": 9, "body": "/converge stop", "user": {"login": "m"}}}

    for number in (1, 9_999_999_999):
        (wake,) = route(event, payload(number), "d1", RULES).wakes
        assert wake.pr_key == str(parse_pr_key(f"octo-org/hello.world#{number}")), wake
    assert route(event, payload(10_000_000_000), "d1", RULES).wakes == ()


@pytest.mark.parametrize("ref", ["refs/heads/\ud800", "refs/heads/a\x00b", "refs/heads/" + "b" * 300, 5])
def test_a_branch_no_database_takes_wakes_nothing(ref):
    assert kinds("push", {"ref": ref, "repository": {"full_name": "o/r"}}) == []


def test_a_check_naming_more_prs_than_the_cap_wakes_its_head_sha_instead():
    rules = EnrollRules(max_prs=3)
    check = {"head_sha": "a" * 40}
    for event in ("check_run", "check_suite"):
        at_cap = {"repository": {"full_name": "o/r"},
                  event: check | {"pull_requests": [{"number": n} for n in (1, 2, 3)]}}
        assert kinds(event, at_cap, rules) == ["sync"] * 3
        past = at_cap | {event: check | {"pull_requests": [{"number": n} for n in range(1, 20_001)]}}
        (wake,) = route(event, past, "d1", rules).wakes
        assert (wake.kind, wake.payload) == ("sync_ref", {"repo": "o/r", "sha": "a" * 40, "branch": None})


def assert_storable(routed, rules: EnrollRules) -> None:
    assert routed.outcome in ("queued", "ignored")
    assert (routed.outcome == "queued") == bool(routed.wakes)
    assert len(routed.wakes) <= rules.max_prs + 2  # the PRs named, an enroll, a command
    assert json.dumps({"reason": routed.reason}, ensure_ascii=False).encode()  # answerable
    for wake in routed.wakes:
        assert storable(wake.key, 300) and storable(wake.kind, 64), wake
        if wake.pr_key is not None:
            assert str(parse_pr_key(wake.pr_key)) == wake.pr_key
        json.dumps(wake.payload)


@settings(FUZZ, max_examples=200)
@given(data=st.data(), event=st.sampled_from(EVENTS))
def test_no_payload_makes_the_routing_raise_or_queue_what_a_database_refuses(data, event):
    payload = data.draw(payloads(event))
    delivery_id = data.draw(st.sampled_from(["d1", "x" * 100]))
    assert_storable(route(event, payload, delivery_id, RULES), RULES)
