"""Each deadline and cap of the round's rules, a moment before it and at it: what kills a cap
loosened by one (`>=` turned into `>`) as surely as its removal (tests/guards/step.toml)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from bot.rules.decide import decide_progress, decide_step, fresh_review
from bot.rules.model import Checks, Escalate, Heal, Nudge, Wait
from bot.rules.reviewers import Reviewer

from .test_decide import FIXING, H1, H2, PR, SETTINGS, T0, done, kinds, review, snap

SECOND = timedelta(seconds=1)


def test_a_review_stamped_in_the_second_the_wait_began_is_fresh_and_one_a_second_before_is_not():
    # GitHub stamps to the second: the wait's start is compared at that resolution.
    waiting = replace(PR, waiting_since=T0 + timedelta(milliseconds=700))
    assert fresh_review(snap(pr=waiting, reviews=(review(at=T0),))).id == 101
    assert fresh_review(snap(pr=waiting, reviews=(review(at=T0 - SECOND),))) is None


def test_with_nobody_required_the_round_waits_until_its_one_timeout_then_escalates():
    optional = replace(SETTINGS, reviewer_specs=(Reviewer("copilot", "copilot", required=False),))
    before = decide_step(snap(settings=optional, now=T0 + timedelta(minutes=30) - SECOND))
    assert kinds(before) == [Nudge, Wait]  # its nudge is due; its timeout is not yet
    (esc,) = decide_step(snap(settings=optional, now=T0 + timedelta(minutes=30))).actions
    assert isinstance(esc, Escalate) and esc.kind == "review_stalled"


def test_a_required_reviewer_is_waited_for_until_the_second_its_timeout_ends():
    patient = replace(SETTINGS, reviewer_specs=(Reviewer("copilot", "copilot", timeout=timedelta(minutes=45)),))
    before = decide_step(snap(settings=patient, now=T0 + timedelta(minutes=45) - SECOND))
    assert not any(isinstance(a, Escalate) for a in before.actions) and kinds(before)[-1] is Wait
    (esc,) = decide_step(snap(settings=patient, now=T0 + timedelta(minutes=45))).actions
    assert isinstance(esc, Escalate) and esc.kind == "review_stalled" and "copilot" in esc.question


def test_an_escalated_pr_with_nothing_open_heals_at_the_end_of_its_grace_not_before():
    esc = replace(PR, status="escalated", escalated_at=T0)
    assert kinds(decide_step(snap(pr=esc, now=T0 + timedelta(minutes=5) - SECOND))) == [Wait]
    assert kinds(decide_step(snap(pr=esc, now=T0 + timedelta(minutes=5)))) == [Heal]


def test_the_nudge_comes_at_the_end_of_its_window_not_before():
    assert kinds(decide_step(snap(now=T0 + timedelta(minutes=10) - SECOND))) == [Wait]
    assert kinds(decide_step(snap(now=T0 + timedelta(minutes=10)))) == [Nudge, Wait]


def test_a_clean_review_waits_for_pending_checks_until_the_second_of_the_timeout():
    pending = Checks("pending", pending=("ci",))
    before = decide_step(snap(reviews=(review(),), checks=pending, now=T0 + timedelta(hours=1) - SECOND))
    assert kinds(before) == [Wait]
    (esc,) = decide_step(snap(reviews=(review(),), checks=pending, now=T0 + timedelta(hours=1))).actions
    assert isinstance(esc, Escalate) and esc.kind == "review_checks"


def test_the_last_allowed_husk_rerun_reruns_and_the_next_escalates():
    husk = done(fixer_finished_at=None)
    last = decide_progress(replace(FIXING, husk_retries=SETTINGS.max_husk_retries - 1), husk, H1, (), SETTINGS)
    assert last.kind == "rerun"
    spent = decide_progress(replace(FIXING, husk_retries=SETTINGS.max_husk_retries), husk, H1, (), SETTINGS)
    assert spent.kind == "escalate" and spent.escalation.kind == "husk"


def test_the_round_before_the_cap_advances_and_the_cap_s_own_round_escalates():
    p = decide_progress(replace(FIXING, current_round=4), done(round_no=4), H2, (), SETTINGS)
    assert (p.kind, p.escalation) == ("advance", None)
    p = decide_progress(replace(FIXING, current_round=5), done(round_no=5), H2, (), SETTINGS)
    assert p.kind == "escalate" and p.escalation.kind == "round_cap"
