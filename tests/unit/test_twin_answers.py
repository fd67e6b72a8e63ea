"""Which threads of a group of twins a verdict answers (bot/engine/fixing.py, answered_threads)."""

from __future__ import annotations

from bot.engine.fixing import answered_threads
from bot.fixers.base import ThreadAction
from bot.rules.findings import from_threads, group, settlements
from bot.rules.model import Thread

TEXT = "Missing null check before dereferencing `user` in `load()`; it crashes on a guest."
NEAR = "Missing null check before dereferencing `user` in `load()`; it crashes on a guest session."


def grouped(*bodies: str):
    authors = ("coderabbitai[bot]", "gemini-code-assist[bot]", "chatgpt-codex-connector[bot]")
    threads = tuple(Thread(id=f"T{i}", is_resolved=False, is_outdated=False, path="src/app.py", line=12 + i,
                           comment_id=100 + i, body=body, author=authors[i])
                    for i, body in enumerate(bodies))
    (lead,) = group(from_threads(threads))
    return lead


def test_an_answer_on_the_lead_reaches_only_the_twins_with_its_exact_text():
    lead = grouped(TEXT, TEXT, NEAR)
    assert lead.thread_id == "T0" and [t[0] for t in lead.twins] == ["T1", "T2"]
    got = answered_threads((lead,), (ThreadAction("T0", "fixed", "guarded"),))
    # T2 says something more ("session"): the answer to T0 does not cover it; the next review judges.
    assert [(f.thread_id, a.action) for f, a in got] == [("T0", "fixed"), ("T1", "fixed")]


def test_each_twin_is_answered_with_the_action_stated_for_its_own_id():
    lead = grouped(TEXT, NEAR)
    got = answered_threads((lead,), (ThreadAction("T1", "declined", "by design"),
                                     ThreadAction("T0", "fixed", "guarded")))
    assert [(f.thread_id, a.action) for f, a in got] == [("T0", "fixed"), ("T1", "declined")]


def test_a_twin_named_alone_does_not_answer_the_lead_and_settles_only_itself():
    lead = grouped(TEXT, NEAR)
    got = answered_threads((lead,), (ThreadAction("T1", "fixed", ""),))
    assert [f.thread_id for f, _ in got] == ["T1"]
    record = settlements([(f, a.action, a.reason) for f, a in got], 1, "https://x/pull/1", "abc")
    assert [r.thread_id for r in record] == ["T1"]


def test_the_lead_answered_settles_only_the_threads_answered():
    lead = grouped(TEXT, NEAR)
    got = answered_threads((lead,), (ThreadAction("T0", "declined", "no"),))
    record = settlements([(f, a.action, a.reason) for f, a in got], 1, "https://x/pull/1", None)
    assert [r.thread_id for r in record] == ["T0"]
