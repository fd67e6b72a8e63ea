"""The moment a command was written for (pure): a command acts only on the run, round and
escalation current when it was written; GitHub stamps to the second on its own clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bot.rules.commands import STAMP_SLACK, late_answer, late_for_run, late_retry, late_start

WRITTEN = datetime(2026, 12, 4, 12, 0, 0, tzinfo=UTC)
SECOND = timedelta(seconds=1)


def test_a_start_is_late_once_a_run_ended_after_it_was_written():
    assert late_start(WRITTEN, None, None) is None  # never enrolled, or no run ended
    assert late_start(WRITTEN, WRITTEN - SECOND, "abandoned") is None  # asked for after the end
    why = late_start(WRITTEN, WRITTEN + timedelta(hours=1), "merged")
    assert why is not None and "(merged)" in why and "`/converge` again" in why
    # Stamped in the second of the end: it may have come after it (a stop, then a start).
    assert late_start(WRITTEN, WRITTEN + timedelta(milliseconds=300), "abandoned") is None
    assert late_start(WRITTEN, WRITTEN + SECOND, "merged") is not None


def test_stop_merge_retry_and_answer_are_late_for_a_run_begun_after_them():
    assert late_for_run("stop", WRITTEN, WRITTEN - timedelta(hours=1)) is None
    # The run started in the comment's second, or a little later on GitHub's clock: current.
    assert late_for_run("merge", WRITTEN, WRITTEN + STAMP_SLACK) is None
    why = late_for_run("retry", WRITTEN, WRITTEN + STAMP_SLACK + SECOND)
    assert why is not None and "`/converge retry`" in why and "earlier run" in why


def test_a_retry_restarts_only_the_round_of_its_moment():
    assert late_retry(WRITTEN, 2, WRITTEN - SECOND) is None
    why = late_retry(WRITTEN, 3, WRITTEN + timedelta(minutes=5))
    assert why is not None and "round 3" in why


def test_an_answer_answers_only_an_escalation_asked_before_it():
    assert late_answer(WRITTEN, 7, WRITTEN - timedelta(minutes=5)) is None
    why = late_answer(WRITTEN, 8, WRITTEN + timedelta(minutes=5))
    assert why is not None and "escalation #8" in why and "again" in why
