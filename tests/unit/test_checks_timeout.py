"""Required checks that never report: the review stage and the merge stage wait for them within
`checks_timeout`, counted from the wait on the head, then ask a maintainer once, naming them."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from bot.rules.decide import decide_step
from bot.rules.merge import CHECKS_UNREPORTED, checks_wait_began, decide_merge, unreported
from bot.rules.model import Checks, Escalate, Wait
from bot.rules.resume import resume_plan

from .test_decide import PR, T0, review, snap
from .test_merge import view

HOUR = timedelta(hours=1)


def blocked(**kw):
    return view(mergeable_state="blocked", now=T0 + HOUR, checks_since=T0, checks_timeout=HOUR, **kw)


def test_a_required_check_with_no_run_or_status_is_unreported():
    runs = [{"name": "lint", "status": "completed"}, {"name": "build", "status": "in_progress"}]
    status = {"statuses": [{"context": "deploy", "state": "pending"}]}
    assert unreported(runs, status, {"ci/test", "lint", "build", "deploy", "e2e"}) == ("ci/test", "e2e")
    assert unreported([], {}, ()) == ()


def test_the_wait_begins_at_the_round_on_the_head_or_a_later_answer():
    assert checks_wait_began(T0, None) == T0
    assert checks_wait_began(T0, T0 + HOUR) == T0 + HOUR
    assert checks_wait_began(T0 + HOUR, T0) == T0 + HOUR
    assert checks_wait_began(None, None) is None


def test_blocked_by_unreported_checks_waits_naming_them_until_the_timeout():
    step = decide_merge(replace(blocked(unreported_checks=("ci/test",)), now=T0 + HOUR - timedelta(seconds=1)))
    assert (step.kind, step.reason) == ("wait", CHECKS_UNREPORTED + "ci/test")


def test_unreported_or_still_running_checks_past_the_timeout_escalate_naming_them():
    step = decide_merge(blocked(unreported_checks=("ci/test",), pending_checks=("build",)))
    assert (step.kind, step.escalation) == ("escalate", "checks_missing")
    assert "`build`, `ci/test` have not reported within 60 minutes" in step.reason
    assert resume_plan("checks_missing") == "merge_stage"


def test_blocked_with_every_check_reported_is_no_checks_timeout():
    assert decide_merge(blocked()).kind == "wait"
    # Without the clock (a view read before the checks were), nothing times out.
    assert decide_merge(view(mergeable_state="blocked", unreported_checks=("ci/test",))).kind == "wait"


def test_a_clean_review_waits_for_checks_then_escalates_once_they_are_overdue():
    pending = Checks("pending", pending=("ci/test",))
    settings = replace(snap().settings, checks_timeout=HOUR)
    early = decide_step(snap(reviews=(review(),), checks=pending, settings=settings))
    assert [type(a) for a in early.actions] == [Wait]
    (esc,) = decide_step(snap(reviews=(review(),), checks=pending, settings=settings, now=T0 + HOUR)).actions
    assert isinstance(esc, Escalate) and esc.kind == "review_checks" and "`ci/test`" in esc.question
    assert resume_plan("review_checks") == "review"
    # Counted from the round's wait on the head: a later wait starts the count again.
    later = replace(PR, waiting_since=T0 + HOUR)
    assert [type(a) for a in decide_step(snap(pr=later, reviews=(review(at=T0 + HOUR),), checks=pending,
                                                  settings=settings, now=T0 + HOUR)).actions] == [Wait]
