"""What a round's read of a review thread says about our reply on it (`thread_of`), and the
writes that follow from it (`writes_for`); the nulls GitHub may send in either."""

import pytest

from bot.effects.replies import Reply, as_read, writes_for
from bot.engine.outbox import reply_marker
from bot.engine.read import checks_of, comment_id_of, thread_of
from bot.github.endpoints.reviews import THREAD_COMMENTS_READ


def raw(thread_id: str, bodies: list[str]) -> dict:
    return {"id": thread_id, "isResolved": False, "isOutdated": False, "path": "a.py", "line": 1,
            "comments": {"nodes": [{"fullDatabaseId": str(n + 1), "body": b, "author": {"login": "x"}}
                                   for n, b in enumerate(bodies)]}}


def test_our_reply_is_seen_on_a_thread_and_unknown_past_the_comments_read():
    assert thread_of(raw("T1", ["why?", f"Fixed.\n\n{reply_marker('T1')}"])).replied is True
    assert thread_of(raw("T1", ["why?", f"Fixed.\n\n{reply_marker('T2')}"])).replied is False
    long = ["more?"] * THREAD_COMMENTS_READ
    assert thread_of(raw("T1", long)).replied is None  # our reply could be on a later page
    assert thread_of(raw("T1", [*long[:-1], reply_marker("T1")])).replied is True


def test_writes_from_the_round_s_read_reply_where_none_is_and_only_resolve_where_one_is():
    writes = writes_for(as_read({"T1": True, "T2": False}), [Reply("T1", "Fixed.", True), Reply("T2", "Fixed.", True),
                                                             Reply("T3", "Fixed.", True)])
    assert [(w.thread_id, w.body is None, w.resolve) for w in writes] == [("T1", True, True), ("T2", False, True)]


def test_a_comment_s_id_is_its_full_database_id_sent_as_a_string():
    assert thread_of(raw("T1", ["why?"])).comment_id == 1
    assert comment_id_of({"fullDatabaseId": "9007199254740993"}) == 2**53 + 1  # past a float's integers
    assert comment_id_of({"fullDatabaseId": 7}) == 7


@pytest.mark.parametrize("value", [None, "", "0", "-5", "12a", " 12", "\u0661\u0662", "9" * 19, "1" * 5000,
                                   True, 2**63, 1.5])
def test_no_id_or_a_malformed_one_is_no_comment_id(value):
    assert comment_id_of({"fullDatabaseId": value, "databaseId": 12}) is None


def test_null_comments_and_fields_read_as_unknown_not_as_a_crash():
    null_first = {**raw("T1", []), "comments": {"nodes": [None, {"body": "me too", "fullDatabaseId": "8"}]}}
    t = thread_of(null_first)
    # The thread's question is unknown: not taken from a later comment.
    assert (t.body, t.author, t.comment_id, t.replied) == ("", None, None, False)
    ghost = thread_of({**raw("T1", []), "comments": {"nodes": [{"body": None, "author": None, "fullDatabaseId": None}]}})
    assert (ghost.body, ghost.author, ghost.comment_id) == ("", "ghost", None)
    bare = thread_of({"id": "T1", "isResolved": None, "isOutdated": None, "path": None, "line": None, "comments": None})
    assert (bare.is_resolved, bare.body, bare.author, bare.comment_id, bare.replied) == (False, "", None, None, False)


def test_a_null_comment_is_not_our_reply_but_fills_the_page_read():
    ours = raw("T1", ["why?", f"Fixed.\n\n{reply_marker('T1')}"])
    ours["comments"]["nodes"].insert(1, None)
    assert thread_of(ours).replied is True
    full = raw("T1", ["why?"])
    full["comments"]["nodes"] += [None] * (THREAD_COMMENTS_READ - 1)
    assert thread_of(full).replied is None  # the page is full: our reply may come after it


def test_writes_skip_null_comments_of_a_thread_read_again():
    threads = {"T1": {"isResolved": False, "comments": {"nodes": [None, {"body": reply_marker("T1")}]}},
               "T2": {"isResolved": False, "comments": {"nodes": [None]}}}
    writes = writes_for(threads, [Reply("T1", "Fixed.", True), Reply("T2", "Fixed.", True)])
    assert [(w.thread_id, w.body is None, w.resolve) for w in writes] == [("T1", True, True), ("T2", False, True)]


def test_null_check_runs_and_statuses_are_skipped():
    runs = [None, {"name": "ci", "status": "completed", "conclusion": "failure"}]
    c = checks_of(runs, {"statuses": [None, {"context": "lint", "state": "pending"}]}, [])
    assert (c.state, c.failing, c.pending) == ("failure", ("ci",), ("lint",))
