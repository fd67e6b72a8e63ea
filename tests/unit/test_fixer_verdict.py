"""Verdict parsing and normalization: a fixer's output can only pick among known outcomes."""

from __future__ import annotations

import json

import pytest

from bot.fixers.base import ThreadAction, Verdict
from bot.fixers.verdict import TEXT_CAP, normalize, parse_verdict


def line(**obj) -> str:
    return json.dumps(obj)


# --- parse_verdict ------------------------------------------------------------------------


def test_the_last_verdict_line_wins_over_earlier_ones():
    out = "\n".join([line(status="needs_input", question="q1"), "log", line(status="addressed")])
    text, raw = parse_verdict(out)
    assert raw == {"status": "addressed"} and text == line(status="addressed")


def test_garbage_and_json_without_status_after_the_verdict_are_ignored():
    out = "\n".join([
        "starting",
        "  " + line(status="converged", summary="ok") + "  \r",
        "{not json at all}",
        line(progress=0.9),
        "[1, 2, 3]",
        '"status"',
        "{\"status\": \"addressed\"",  # truncated
        "done.",
    ])
    assert parse_verdict(out)[1] == {"status": "converged", "summary": "ok"}


@pytest.mark.parametrize("out", ["", "\n\n", "plain text", line(summary="no status"), "[{}]",
                                 "prefix " + line(status="addressed")])
def test_no_verdict_line(out):
    assert parse_verdict(out) == ("", None)


def test_a_null_status_still_counts_as_a_verdict_line():
    assert parse_verdict(line(status=None))[1] == {"status": None}


# --- normalize ----------------------------------------------------------------------------


def test_no_verdict_is_addressed_and_keeps_finished():
    assert normalize(None, finished=True) == Verdict(status="addressed", finished=True)
    assert normalize(None, finished=False) == Verdict(status="addressed", finished=False)


@pytest.mark.parametrize("status,expected", [
    ("addressed", "addressed"),
    ("converged", "converged"),
    ("waiting", "waiting"),
    ("  CONVERGED ", "converged"),
    ("Needs-Input", "addressed"),  # no question: see below
    ("", "addressed"),
    ("   ", "addressed"),
    ("done", "addressed"),
    ("fixed", "addressed"),
    (None, "addressed"),
    (3, "addressed"),
    (["converged"], "addressed"),
])
def test_blank_or_unknown_status_is_addressed(status, expected):
    assert normalize({"status": status}, finished=True).status == expected


@pytest.mark.parametrize("status", ["needs_input", "blocked", "needs input", "BLOCKED"])
@pytest.mark.parametrize("question", [None, "", "   \n", 42, ["why?"]])
def test_a_question_status_without_a_question_is_addressed(status, question):
    raw = {"status": status} if question is None else {"status": status, "question": question}
    verdict = normalize(raw, finished=True)
    assert verdict.status == "addressed" and verdict.question is None


@pytest.mark.parametrize("status,expected", [("needs_input", "needs_input"), ("blocked", "blocked"),
                                             ("Needs-Input", "needs_input")])
def test_a_question_status_keeps_its_trimmed_question(status, expected):
    verdict = normalize({"status": status, "question": "  Keep v1?  \n"}, finished=True)
    assert (verdict.status, verdict.question) == (expected, "Keep v1?")


def test_a_question_on_another_status_is_dropped():
    verdict = normalize({"status": "addressed", "question": "Anything else?"}, finished=True)
    assert verdict.question is None


def test_summary_and_question_are_trimmed_and_capped():
    verdict = normalize(
        {"status": "blocked", "summary": "  " + "s" * 10_000, "question": "q" * 10_000},
        finished=True,
    )
    assert verdict.summary == "s" * TEXT_CAP and verdict.question == "q" * TEXT_CAP
    assert normalize({"status": "addressed", "summary": 12}, finished=True).summary == ""


def test_thread_actions_keep_known_well_formed_entries():
    raw = {
        "status": "addressed",
        "threads": [
            {"id": "T1", "action": "fixed", "reason": " renamed "},
            {"id": "T2", "action": "DECLINED", "reason": "by design"},
            {"id": "T3", "action": "needs_human"},
            {"id": "T4", "action": "ignored"},  # unknown action
            {"id": 5, "action": "fixed"},  # id not a string
            {"id": "  ", "action": "fixed"},  # blank id
            {"action": "fixed"},  # no id
            {"id": "T6"},  # no action
            {"id": "T7", "action": None},
            "T8",
            ["T9", "fixed"],
            None,
            {"id": "T10", "action": "fixed", "reason": 7},  # bad reason: kept, reason dropped
        ],
    }
    assert normalize(raw, finished=True).thread_actions == (
        ThreadAction("T1", "fixed", "renamed"),
        ThreadAction("T2", "declined", "by design"),
        ThreadAction("T3", "needs_human", ""),
        ThreadAction("T10", "fixed", ""),
    )


@pytest.mark.parametrize("threads", [None, "T1", {"id": "T1", "action": "fixed"}, 3, []])
def test_threads_that_are_not_a_list_give_no_actions(threads):
    verdict = normalize({"status": "addressed", "threads": threads}, finished=True)
    assert verdict.thread_actions == ()


def test_a_thread_named_twice_keeps_its_last_action():
    raw = {"status": "addressed", "threads": [
        {"id": "T1", "action": "fixed"}, {"id": "T2", "action": "fixed"},
        {"id": "T1", "action": "declined", "reason": "on second thought"}]}
    assert normalize(raw, finished=True).thread_actions == (
        ThreadAction("T2", "fixed"), ThreadAction("T1", "declined", "on second thought"))


def test_a_verdict_cannot_claim_a_push_or_a_comment():
    raw = {"status": "addressed", "pushed_head": "a" * 40, "push_rejected": True,
           "comment": "spam", "finished": False, "detail": "x"}
    assert normalize(raw, finished=True) == Verdict(status="addressed", finished=True)


def test_parse_then_normalize_end_to_end():
    out = "noise\n" + line(status="blocked", summary="stuck", question="Drop py3.8?",
                           threads=[{"id": "PRRT_x", "action": "needs_human", "reason": "policy"}])
    verdict = normalize(parse_verdict(out)[1], finished=True)
    assert verdict == Verdict(
        status="blocked", summary="stuck", question="Drop py3.8?",
        thread_actions=(ThreadAction("PRRT_x", "needs_human", "policy"),), finished=True)
