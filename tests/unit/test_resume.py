"""How an answer resumes a run (bot/rules/resume.py)."""

from __future__ import annotations

from bot.rules.resume import RESUME, resume_plan


def test_a_run_paused_while_its_fixer_worked_goes_back_to_the_fixer_s_round():
    # The write budget pauses a run at any moment: mid-fix, an answer that asked for a review
    # would leave the round open with nothing to close it.
    assert resume_plan("runaway") == "review"
    assert resume_plan("runaway", mid_fix=True) == "fixing"


def test_only_a_plan_that_asks_for_a_review_is_changed_mid_fix():
    for kind, plan in RESUME.items():
        assert resume_plan(kind, mid_fix=True) == ("fixing" if plan == "review" else plan), kind
    assert resume_plan("something new") == "rerun"
