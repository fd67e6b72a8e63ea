"""`convergence.block_on`: which findings of a fresh review hold convergence back (pure)."""

from dataclasses import replace
from datetime import timedelta

import pytest

from bot.config import Config
from bot.engine.check_summary import render
from bot.engine.repoconfig import RepoConfigError, parse
from bot.rules.decide import decide_step
from bot.rules.findings import from_threads, thread_fingerprint
from bot.rules.model import Checks, Converge, Fix, Settled, Thread
from bot.rules.reviewers import Reviewer

from .test_decide import ROUND, SETTINGS, review, snap

NIT = "_🧹 Nitpick_ | _🔵 Trivial_\n\n**Prefer an f-string.**"
MAJOR = "![high](https://www.gstatic.com/codereviewagent/high-priority.svg)\n\nDivides by zero on an empty list."
MINOR = "**<sub><sub>![P2 Badge](https://img.shields.io/badge/P2-yellow?style=flat)</sub></sub>  Slow path**"


def thread(id, body, path="a.py", line=3, author="copilot"):
    return Thread(id=id, is_resolved=False, is_outdated=False, path=path, line=line, comment_id=9,
                  body=body, author=author)


def decide(block_on="nit", threads=(), reviews=(review(),), checks=Checks("success"), history=(), settings=None):
    return decide_step(snap(reviews=reviews, threads=tuple(threads), checks=checks, history=history,
                            settings=settings or replace(SETTINGS, block_on=block_on)))


def test_only_nits_left_converges_under_block_on_major_and_keeps_them_for_the_check_run():
    d = decide("major", [thread("N1", NIT), thread("N2", MINOR, path="b.py")])
    (conv,) = d.actions
    assert isinstance(conv, Converge)
    assert [(f.thread_id, f.severity, f.optional) for f in conv.optional] == [("N1", "nit", True),
                                                                            ("N2", "minor", True)]


def test_the_default_block_on_nit_blocks_on_every_finding():
    (fix,) = decide("nit", [thread("N1", NIT)]).actions
    assert isinstance(fix, Fix) and [f.thread_id for f in fix.findings] == ["N1"]
    assert not fix.findings[0].optional


def test_a_round_that_runs_the_fixer_hands_the_nits_over_as_optional():
    (fix,) = decide("major", [thread("M1", MAJOR), thread("N1", NIT, path="b.py")]).actions
    assert isinstance(fix, Fix)
    assert [(f.thread_id, f.severity, f.optional) for f in fix.findings] == [("M1", "major", False),
                                                                           ("N1", "nit", True)]


def test_an_unmarked_finding_takes_its_reviewers_default():
    lenient = replace(SETTINGS, block_on="major",
                      reviewer_specs=(Reviewer("copilot", kind="copilot", default_severity="minor"),))
    (conv,) = decide(threads=[thread("U1", "Consider renaming this.")], settings=lenient).actions
    assert isinstance(conv, Converge) and conv.optional[0].severity == "minor"
    # Someone not configured: "major", it blocks.
    (fix,) = decide(threads=[thread("U2", "Consider renaming this.", author="someone")],
                    settings=lenient).actions
    assert isinstance(fix, Fix) and fix.findings[0].severity == "major"


def test_a_failing_check_blocks_whatever_block_on_says():
    (fix,) = decide("critical", [thread("N1", NIT)], checks=Checks("failure", failing=("ci",))).actions
    assert isinstance(fix, Fix)
    assert [(f.body.startswith("The required check"), f.optional) for f in fix.findings] == [(True, False),
                                                                                           (False, True)]


def test_a_persons_change_request_is_major_beside_the_bots_threads():
    person = review(id=102, user="alice", state="CHANGES_REQUESTED", body="Please add a docstring.")
    (fix,) = decide("major", [thread("N1", NIT)], reviews=(review(), person)).actions
    assert isinstance(fix, Fix)
    # What blocks first, then what is optional.
    assert [(f.author, f.severity, f.optional) for f in fix.findings] == [("alice", "major", False),
                                                                        ("copilot", "nit", True)]


def test_a_repeat_of_a_declined_finding_is_carried_over_not_fixed():
    fp = thread_fingerprint("a.py", MAJOR)
    earlier = replace(ROUND, status="addressed", settled=(
        Settled(fp, "declined", 1, "https://x/pull/1#discussion_r9", "T-old", "out of scope"),))
    later = replace(ROUND, round_no=3)
    d = decide_step(snap(round=later, reviews=(review(),), threads=(thread("T-new", MAJOR, line=30),),
                         history=(earlier,), now=snap().now + timedelta(seconds=1)))
    fix, then = d.actions
    assert isinstance(fix, Fix) and fix.findings == ()
    ((finding, text),) = fix.declines
    assert finding.thread_id == "T-new" and "https://x/pull/1#discussion_r9" in text
    assert isinstance(then, Converge)  # applied once the answer is no longer queued
    # Once our answer is on its thread, the run converges.
    answered = replace(thread("T-new", MAJOR, line=30), replied=True)
    (conv,) = decide_step(snap(round=later, reviews=(review(),), threads=(answered,), history=(earlier,))).actions
    assert isinstance(conv, Converge)


def test_twins_reach_the_fixer_once():
    a = thread("A", MAJOR, author="gemini-code-assist[bot]")
    b = thread("B", "_⚠️ Potential issue_ | _🟠 Major_\n\n**Divides by zero on an empty list.**",
               line=4, author="coderabbitai[bot]")
    (fix,) = decide("nit", [a, b]).actions
    assert isinstance(fix, Fix) and len(fix.findings) == 1
    assert {fix.findings[0].thread_id, fix.findings[0].twins[0][0]} == {"A", "B"}



def test_a_repository_sets_its_own_block_on_and_a_wrong_one_is_refused_in_one_line():
    base = Config.model_validate({"convergence": {"reviewers": ["copilot"]}})
    assert base.convergence.block_on == "nit"  # today's behaviour: every finding blocks
    assert parse('[convergence]\nblock_on = "major"\n', base).convergence.block_on == "major"
    with pytest.raises(RepoConfigError) as e:
        parse('[convergence]\nblock_on = "blocker"\n', base)
    assert "block_on" in str(e.value) and "\n" not in str(e.value).strip()


def test_the_check_run_counts_what_blocks_and_lists_the_rest():
    nits = tuple(replace(f, optional=True) for f in from_threads((
        thread("N1", NIT, path="b.py", author="coderabbitai"),
        thread("N2", "nit: `x` **could** be <b>named</b>", path="c.py", line=7, author="alice"))))
    out = render("converged", 2, 8, 0, "converged at 1234567", optional=nits)["output"]
    assert out["title"] == "converged · round 2/8 · 0 finding(s) left · 2 non-blocking"
    assert "**Findings left:** 0" in out["summary"]
    assert "- nit · b.py:3 by coderabbitai: prefer an f-string." in out["summary"]
    assert "- nit · c.py:7 by alice: x could be named" in out["summary"]
    # Without any, nothing is said about them.
    assert "Non-blocking" not in render("converged", 2, 8, 0, None)["output"]["summary"]


def test_the_check_run_shows_what_the_fixer_said_fenced():
    # An agent that changed nothing: its CLI's words are why the PR waits, shown as text (a
    # code block no backtick in them can close), never rendered as the agent's Markdown.
    said = "the agent changed nothing: its CLI reported edit: No match found\n```\n![x](http://e.test/x.png)"
    summary = render("escalated", 1, 8, 1, "escalated: no_advance", fixer_said=said)["output"]["summary"]
    assert "**The fixer said:**\n\n````text\nthe agent changed nothing: its CLI reported edit: No match found" in summary
    assert summary.endswith("![x](http://e.test/x.png)\n````")
    assert "The fixer said" not in render("converging", 1, 8, 1, "round 1")["output"]["summary"]
