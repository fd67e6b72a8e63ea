from datetime import timedelta

import pytest

from bot.rules.merge import (
    APPROVAL_WANTED,
    DependencyError,
    FailedCheck,
    MergeView,
    ReviewsWanted,
    decide_merge,
    explicit_dependencies,
    failed_checks,
    find_cycle,
    fix_findings,
    parse_dependencies,
    reviews_wanted,
)
from storage.keys import PrKey, parse_pr_key

H1, H2 = "1" * 40, "2" * 40


def view(**kw) -> MergeView:
    base = dict(status="waiting_merge", head=H1, converged_head=H1, mergeable_state="clean",
                unmerged_deps=(), cycle=None, require_approval=False, approved=False)
    return MergeView(**(base | kw))


def test_dependencies_are_parsed_case_insensitively_comma_or_space_separated():
    body = "Adds x.\n\ndepends-on: octo/lib#3, #4  other/repo#5\nDEPENDS ON: #4\nnot depends-on: x#1"
    assert parse_dependencies(body, "octo/app") == ["octo/lib#3", "octo/app#4", "other/repo#5"]
    assert parse_dependencies(None, "octo/app") == []
    assert parse_dependencies("Depends-on: nonsense, #x", "octo/app") == []


def test_explicit_dependencies_are_keys_in_the_order_given_once_each():
    pr = parse_pr_key("octo/app#7")
    given = ["octo/lib#3", "#4", " https://github.com/Other/Repo/pull/5 ", "octo/app#4", "OCTO/LIB#3"]
    keys = explicit_dependencies(pr, given)
    assert keys == ("octo/lib#3", "octo/app#4", "other/repo#5")
    assert all(isinstance(k, PrKey) for k in keys)
    assert explicit_dependencies(pr, []) == ()


@pytest.mark.parametrize("word,why", [
    ("nonsense", "malformed dependency 'nonsense': expected owner/repo#N or #N"),
    ("#0", "malformed dependency '#0': expected owner/repo#N or #N"),
    ("#x", "malformed dependency '#x': expected owner/repo#N or #N"),
    ("#²", "malformed dependency '#²': expected owner/repo#N or #N"),
    ("octo/app", "malformed dependency 'octo/app': expected owner/repo#N or #N"),
    ("", "malformed dependency '': expected owner/repo#N or #N"),
    ("#7", "octo/app#7 cannot depend on itself"),
    ("Octo/App#7", "octo/app#7 cannot depend on itself"),
])
def test_an_explicit_dependency_that_is_no_key_or_the_pr_itself_is_refused_by_name(word, why):
    # Unlike a body's line (prose: a word that is no key is skipped), what is given is refused.
    with pytest.raises(DependencyError) as refused:
        explicit_dependencies(parse_pr_key("octo/app#7"), ["octo/lib#1", word])
    assert str(refused.value) == why


def test_cycles_are_found():
    edges = {"a#1": ["a#2"], "a#2": ["a#3"], "a#3": ["a#1"], "b#1": ["a#1"]}
    assert find_cycle("a#1", edges) == ["a#1", "a#2", "a#3", "a#1"]
    assert find_cycle("b#1", edges) is None


@pytest.mark.parametrize("state,kind", [
    ("clean", "merge"), ("unstable", "merge"), ("has_hooks", "merge"), ("behind", "update_branch"),
    ("dirty", "fix_round"), ("blocked", "wait"), ("unknown", "wait_unknown"), (None, "wait_unknown"),
    ("draft", "wait"),
])
def test_mergeability(state, kind):
    assert decide_merge(view(mergeable_state=state)).kind == kind


def test_dependencies_gate_the_merge():
    assert decide_merge(view(status="waiting_deps", unmerged_deps=("o/r#1",))).kind == "wait"
    assert decide_merge(view(status="waiting_deps")).kind == "to_merge"
    assert decide_merge(view(status="waiting_deps", cycle=("a", "b", "a"))).kind == "escalate"


def test_a_stacked_pr_whose_parent_landed_is_re_based_before_it_may_merge():
    parent = parse_pr_key("o/r#1")
    step = decide_merge(view(status="waiting_deps", restack=(parent,)))
    assert (step.kind, step.reason) == ("restack", "re-basing onto its parent's base: o/r#1 landed")
    # Its parent not landed yet: it waits, as for any dependency.
    assert decide_merge(view(status="waiting_deps", unmerged_deps=(parent,))).kind == "wait"


def test_a_push_after_convergence_starts_a_new_round():
    assert decide_merge(view(head=H2)).kind == "new_round"
    assert decide_merge(view(status="waiting_deps", head=H2)).kind == "new_round"


def test_approval_required():
    assert decide_merge(view(require_approval=True)).kind == "wait"
    assert decide_merge(view(require_approval=True, approved=True)).kind == "merge"


def test_an_unconfirmed_merge_is_re_read_not_retried():
    assert decide_merge(view(status="merging")).kind == "back_to_waiting"


RED = FailedCheck("ci/test", "failure", "2 tests failed", "test_x failed", "https://ci.example/1")


def test_a_conflict_goes_to_the_fixer_within_its_budget_then_escalates_naming_the_files():
    step = decide_merge(view(mergeable_state="dirty", conflict_files=("a.py", "b.py"), conflict_rounds=1))
    assert (step.kind, step.round_kind) == ("fix_round", "conflict")
    step = decide_merge(view(mergeable_state="dirty", conflict_files=("a.py", "b.py"), conflict_rounds=2))
    assert (step.kind, step.escalation) == ("escalate", "conflict")
    assert "`a.py`, `b.py`" in step.reason
    assert decide_merge(view(mergeable_state="dirty", conflict_attempts=0)).kind == "escalate"


def test_failing_checks_go_to_the_fixer_within_their_budget_then_escalate_naming_them():
    for state in ("blocked", "unstable"):
        step = decide_merge(view(mergeable_state=state, failing_checks=(RED,)))
        assert (step.kind, step.round_kind) == ("fix_round", "ci")
    step = decide_merge(view(mergeable_state="blocked", failing_checks=(RED,), ci_rounds=2))
    assert (step.kind, step.escalation) == ("escalate", "ci")
    assert "`ci/test`" in step.reason


def test_blocked_without_a_failing_check_waits_and_says_for_what():
    assert "still running: ci/test" in decide_merge(view(mergeable_state="blocked",
                                                         pending_checks=("ci/test",))).reason
    step = decide_merge(view(mergeable_state="blocked"))
    assert step.kind == "wait" and "required reviews" in step.reason


def test_blocked_for_an_approving_review_says_whose_and_how_many_branch_protection_requires():
    step = decide_merge(view(mergeable_state="blocked", reviews_wanted=ReviewsWanted(("alice", "@octo/core"), 2)))
    assert (step.kind, step.reason) == ("wait", APPROVAL_WANTED + "alice, @octo/core (2 required)")
    step = decide_merge(view(mergeable_state="blocked", reviews_wanted=ReviewsWanted()))
    assert step.reason == APPROVAL_WANTED + "someone with write access"
    # A check still running is what holds it first.
    step = decide_merge(view(mergeable_state="blocked", pending_checks=("ci/test",), reviews_wanted=ReviewsWanted()))
    assert "still running: ci/test" in step.reason


@pytest.mark.parametrize("gh_pr,rule,text", [
    ({"requested_reviewers": [{"login": "alice"}], "requested_teams": [{"slug": "core"}]},
     {"requiredApprovingReviewCount": 2, "requiresCodeOwnerReviews": False}, "alice, @octo/core (2 required)"),
    ({"requested_reviewers": [], "requested_teams": []},
     {"requiredApprovingReviewCount": 1, "requiresCodeOwnerReviews": True},
     "someone with write access (1 required, a code owner's among them)"),
    ({"requested_reviewers": None, "requested_teams": None},
     {"requiredApprovingReviewCount": None, "requiresCodeOwnerReviews": True},
     "someone with write access (a code owner's required)"),
    # No rule GitHub shows the app (a ruleset it cannot read): whom, without a count.
    ({"requested_reviewers": [{"login": "bob"}, None]}, None, "bob"),
    ({}, {"requiredApprovingReviewCount": 0, "requiresCodeOwnerReviews": False}, "someone with write access"),
])
def test_whom_an_approval_is_wanted_of_is_read_from_the_pr_and_its_base_branch_s_rule(gh_pr, rule, text):
    assert reviews_wanted(gh_pr, rule, "octo").text == text


def test_unknown_mergeability_is_re_polled_then_escalated_as_stalled():
    assert decide_merge(view(mergeable_state=None, unknown_for=timedelta(minutes=9))).kind == "wait_unknown"
    step = decide_merge(view(mergeable_state=None, unknown_for=timedelta(minutes=10)))
    assert (step.kind, step.escalation) == ("escalate", "mergeability")
    assert "stalled" in step.reason


def test_failed_checks_read_runs_and_statuses_and_keep_to_the_required_ones():
    runs = [
        {"name": "convergebot", "status": "completed", "conclusion": "failure"},
        {"name": "ci/test", "status": "completed", "conclusion": "failure", "details_url": "u",
         "output": {"title": "t", "summary": "s"}},
        {"name": "lint", "status": "in_progress", "conclusion": None},
        {"name": "docs", "status": "completed", "conclusion": "success"},
    ]
    status = {"statuses": [{"context": "legacy", "state": "error", "description": "d", "target_url": "v"}]}
    failing, pending = failed_checks(runs, status, [])
    assert [c.name for c in failing] == ["ci/test", "legacy"] and pending == ("lint",)
    assert failing[0] == FailedCheck("ci/test", "failure", "t", "s", "u")
    failing, pending = failed_checks(runs, status, ["ci/test"])
    assert [c.name for c in failing] == ["ci/test"] and pending == ()


def test_fix_findings_name_each_file_or_check():
    conflict = decide_merge(view(mergeable_state="dirty", conflict_files=("a.py",)))
    (f,) = fix_findings(conflict, view(conflict_files=("a.py",)), "main")
    assert f.path == "a.py" and "origin/main" in f.body
    (f,) = fix_findings(conflict, view(), "main")
    assert f.path is None and "conflicts with `main`" in f.body
    ci = decide_merge(view(mergeable_state="blocked", failing_checks=(RED,)))
    (f,) = fix_findings(ci, view(failing_checks=(RED,)), "main")
    assert "`ci/test`" in f.body and "2 tests failed" in f.body and "https://ci.example/1" in f.body
    annotated = FailedCheck("ci/test", "failure", annotations=("app/x.py:3: failure: boom",))
    (f,) = fix_findings(ci, view(failing_checks=(annotated,)), "main")
    assert "- app/x.py:3: failure: boom" in f.body


def test_merge_tries_stop_at_their_budget_with_one_escalation_naming_the_last_refusal():
    assert decide_merge(view(merge_tries=4, merge_attempts=5)).kind == "merge"
    step = decide_merge(view(merge_tries=5, merge_attempts=5, last_action="merge refused: 405"))
    assert step.kind == "escalate" and "5 merge tries" in step.reason and "405" in step.reason


def test_required_checks_silent_past_their_timeout_are_escalated_not_waited_on():
    from datetime import UTC, datetime
    now = datetime(2026, 1, 1, tzinfo=UTC)
    silent = dict(mergeable_state="blocked", pending_checks=("ci",), unreported_checks=("lint",), now=now,
                  checks_timeout=timedelta(hours=1))
    assert decide_merge(view(**silent, checks_since=now - timedelta(minutes=59))).kind == "wait"
    step = decide_merge(view(**silent, checks_since=now - timedelta(hours=1)))
    assert step.kind == "escalate" and step.escalation == "checks_missing" and "`ci`, `lint`" in step.reason
