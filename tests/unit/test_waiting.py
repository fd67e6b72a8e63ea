"""What an active PR waits on and since when, from its row and round (bot/rules/waiting.py)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from bot.rules.decide import review_wait_limit
from bot.rules.merge import APPROVAL_WANTED, AWAITING_APPROVAL, CHECKS_RUNNING
from bot.rules.model import Settings
from bot.rules.reviewers import Reviewer
from bot.rules.waiting import KINDS, Limits, ends_by, waiting

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
T1, T2 = T0 + timedelta(minutes=1), T0 + timedelta(minutes=2)


def row(**kw):
    base = dict(waiting_since=T0, escalated_at=None, converged_at=T1, merge_budget_since=None,
                mergeability_unknown_since=None, updated_at=T2, merge_group=None, last_action=None)
    return SimpleNamespace(**(base | kw))


@pytest.mark.parametrize("status,pr,text,since", [
    ("waiting_merge", row(last_action=CHECKS_RUNNING + "build, lint"), "check: build, lint", T0),
    ("waiting_merge", row(last_action=CHECKS_RUNNING + "build", merge_budget_since=T2), "check: build", T2),
    ("waiting_merge", row(mergeability_unknown_since=T2), "mergeability", T2),
    ("waiting_merge", row(last_action=AWAITING_APPROVAL), "maintainer: /converge merge", T1),
    ("waiting_merge", row(last_action=APPROVAL_WANTED + "alice (2 required)"),
     "reviewer: an approving review from alice (2 required)", T1),
    ("waiting_merge", row(last_action="merging"), "merge", T1),
    ("waiting_deps", row(merge_budget_since=T2), "dependency", T2),
    ("escalated", row(escalated_at=T2), "maintainer: a maintainer's answer", T2),
    ("converging", row(), "bot", T2),
])
def test_each_wait_names_whom_and_since_when(status, pr, text, since):
    wait = waiting(status, pr, None)
    assert wait is not None and (wait.text, wait.since) == (text, since) and wait.kind in KINDS


def test_a_review_names_the_reviewers_asked_and_a_finished_pr_waits_on_nothing():
    assert waiting("waiting_review", row(), None, reviewers=("copilot", "coderabbitai")).text == \
        "reviewer: copilot, coderabbitai"
    for status in ("merged", "converged", "abandoned"):
        assert waiting(status, row(), None) is None


@pytest.mark.parametrize("status,rnd,dated", [
    ("waiting_review", None, True),  # dated by waiting_since, even where it equals updated_at
    ("merging", None, False),  # dated by updated_at, which every write of the row moves
    ("converging", None, False),
    ("converging", SimpleNamespace(fixer_started_at=None, status=None, started_at=T1), True),
])
def test_a_wait_dated_by_the_row_s_last_write_says_so(status, rnd, dated):
    # The check run prints only a date that stays put: an idle PR's re-read writes its row, and
    # a line that moved with it rewrote the check run of every PR re-read (the idle-poll bench
    # counted up to 80 check-run creates a tick over 1,000 idle PRs).
    assert waiting(status, row(updated_at=T0), rnd).dated is dated


LIMITS = Limits(review=timedelta(hours=1), checks=timedelta(hours=2), mergeability=timedelta(minutes=10))


@pytest.mark.parametrize("status,pr,rnd,until", [
    ("waiting_review", row(), None, T0 + timedelta(hours=1)),
    ("waiting_merge", row(last_action=CHECKS_RUNNING + "build"), None, T0 + timedelta(hours=2)),
    ("waiting_merge", row(mergeability_unknown_since=T2), None, T2 + timedelta(minutes=10)),
    # Waits only others end, or the bot's own work (a job of its own), carry no date.
    ("escalated", row(escalated_at=T2), None, None),
    ("waiting_merge", row(last_action=AWAITING_APPROVAL), None, None),
    ("waiting_merge", row(last_action=APPROVAL_WANTED + "alice"), None, None),
    ("waiting_deps", row(merge_budget_since=T2), None, None),
    ("merging", row(), None, None),
    ("converging", row(), SimpleNamespace(fixer_started_at=T1, status=None, fixer="author", started_at=T0), None),
    ("waiting_review", row(waiting_since=None), None, None),
])
def test_a_wait_the_bot_ends_by_itself_is_dated_by_its_start_and_limit(status, pr, rnd, until):
    wait = waiting(status, pr, rnd)
    assert wait is not None and ends_by(status, wait, LIMITS) == until


def test_a_review_wait_lasts_the_longest_required_reviewer_s_timeout_or_the_checks_timeout():
    slow = Reviewer("coderabbitai", kind="comment", timeout=timedelta(hours=3))
    base = Settings(reviewers=("copilot",), review_wait_timeout=timedelta(minutes=30), nudge_window=timedelta(0),
                    heal_grace=timedelta(0), fixer_kind="fake", bot_login="bot", checks_timeout=timedelta(hours=1))
    assert review_wait_limit(base) == timedelta(hours=1)
    assert review_wait_limit(replace(base, checks_timeout=timedelta(minutes=5))) == timedelta(minutes=30)
    assert review_wait_limit(replace(base, reviewer_specs=(*base.roster, slow))) == timedelta(hours=3)
