"""A finding settled in an earlier round of the run is carried over: answered, not fixed again."""

from dataclasses import replace

from bot.rules.findings import (
    carried_over,
    from_threads,
    settled_index,
    settlements,
    thread_fingerprint,
)
from bot.rules.model import Settled, Thread

CODEX = ("**<sub><sub>![P2 Badge](https://img.shields.io/badge/P2-yellow?style=flat)</sub></sub>  "
         "Cache the parsed config**\n\nThe config is parsed on every call.\n\nUseful? React with 👍 / 👎.")
PR_URL = "https://github.com/acme/app/pull/7"


def thread(id="T1", line=12, body=CODEX, path="app/core.py", comment_id=501) -> Thread:
    return Thread(id=id, is_resolved=False, is_outdated=False, path=path, line=line, comment_id=comment_id,
                  body=body, author="chatgpt-codex-connector[bot]")


def test_the_fingerprint_ignores_the_line_and_the_bots_wrapping():
    moved = thread(line=40)
    rewrapped = thread(body="Cache the parsed config\n\nThe config is parsed on every call.")
    assert thread_fingerprint("app/core.py", CODEX) == thread_fingerprint(moved.path, moved.body)
    assert thread_fingerprint("app/core.py", CODEX) == thread_fingerprint(rewrapped.path, rewrapped.body)
    assert thread_fingerprint("app/core.py", CODEX) != thread_fingerprint("app/other.py", CODEX)


def test_a_declined_finding_repeated_after_a_line_move_is_answered_with_the_link():
    (first,) = from_threads((thread(),))
    record = settlements([(first, "declined", "the config is tiny")], 1, PR_URL, None)
    assert record == (Settled(first.fingerprint, "declined", 1, f"{PR_URL}#discussion_r501", "T1",
                              "the config is tiny"),)
    repeated = from_threads((thread(id="T9", line=30, comment_id=900),))
    new, carried = carried_over(repeated, settled_index(record))
    assert new == ()
    ((finding, text),) = carried
    assert finding.thread_id == "T9"
    assert text == f"Already declined in round 1 (the config is tiny): {PR_URL}#discussion_r501"


def test_a_fixed_finding_raised_again_goes_back_to_the_fixer():
    """A fix the reviewer raises again is evidence it did not fix: only a decline is carried over."""
    (first,) = from_threads((thread(),))
    record = settlements([(first, "fixed", "cached")], 2, PR_URL, "abc123")
    assert record[0].url == f"{PR_URL}/commits/abc123"
    repeated = from_threads((thread(id="T2", line=5),))
    assert carried_over(repeated, settled_index(record)) == (repeated, ())


def test_a_decline_after_a_fix_is_carried_over_and_a_fix_after_a_decline_is_not():
    (first,) = from_threads((thread(),))
    fixed = settlements([(first, "fixed", "")], 1, PR_URL, "abc123")
    declined = settlements([(first, "declined", "by design")], 2, PR_URL, None)
    repeated = from_threads((thread(id="T2", line=5),))
    _, ((_, text),) = carried_over(repeated, settled_index(fixed + declined))
    assert text.startswith("Already declined in round 2 (by design)")
    later_fix = settlements([(first, "fixed", "")], 3, PR_URL, "def456")
    assert carried_over(repeated, settled_index(fixed + declined + later_fix)) == (repeated, ())


def test_new_findings_and_reopened_threads_go_to_the_fixer():
    (first,) = from_threads((thread(),))
    index = settled_index(settlements([(first, "declined", "no")], 1, PR_URL, None))
    other = from_threads((thread(id="T3", body="Rename `cfg`."),))
    assert carried_over(other, index) == (other, ())
    # The settled thread itself, unresolved again by someone: a new question, not a repeat.
    reopened = from_threads((thread(),))
    assert carried_over(reopened, index) == (reopened, ())


def test_needs_human_settles_nothing_and_a_group_settles_every_thread():
    (a,) = from_threads((thread(),))
    assert settlements([(a, "needs_human", "?")], 1, PR_URL, None) == ()
    twin = replace(thread(id="T5", comment_id=777), body="The config is parsed on every call; cache it.")
    (b,) = from_threads((twin,))
    lead = replace(a, twins=(("T5", "gemini-code-assist[bot]", False, b.fingerprint),))
    record = settlements([(lead, "fixed", "")], 1, PR_URL, "f00d")
    assert {r.fingerprint for r in record} == {a.fingerprint, b.fingerprint}
    assert {r.thread_id for r in record} == {"T1", "T5"}


def test_the_latest_settlement_is_last():
    older = Settled("fp", "declined", 1, "u1")
    newer = Settled("fp", "fixed", 3, "u3")
    assert settled_index([newer, older])["fp"] == (older, newer)


def test_every_thread_of_a_settled_text_stays_settled_and_a_reopened_one_goes_to_the_fixer():
    """Two threads with one text settled together: a person reopening either is disagreeing, not
    a repeat to answer "Already declined" and resolve again every round."""
    a, b = from_threads((thread(id="T1", comment_id=501), thread(id="T2", line=40, comment_id=502)))
    assert a.fingerprint == b.fingerprint
    index = settled_index(settlements([(a, "declined", ""), (b, "declined", "")], 1, PR_URL, None))
    assert {s.thread_id for s in index[a.fingerprint]} == {"T1", "T2"}
    for reopened in ("T1", "T2"):
        found = from_threads((thread(id=reopened, comment_id=1),))
        assert carried_over(found, index) == (found, ())
    # A third thread saying the same is still a repeat, answered with the latest settlement.
    (repeat,) = from_threads((thread(id="T3", comment_id=503),))
    new, ((f, text),) = carried_over((repeat,), index)
    assert new == () and f.thread_id == "T3" and text.startswith("Already declined in round 1")
