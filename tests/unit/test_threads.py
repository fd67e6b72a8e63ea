"""What a round's read of a review thread says about our reply on it (`thread_of`), and the
writes that follow from it (`writes_for`)."""

from bot.engine.read import thread_of
from bot.engine.threads import Reply, as_read, reply_marker, writes_for
from bot.github.client import THREAD_COMMENTS_READ


def raw(thread_id: str, bodies: list[str]) -> dict:
    return {"id": thread_id, "isResolved": False, "isOutdated": False, "path": "a.py", "line": 1,
            "comments": {"nodes": [{"databaseId": n + 1, "body": b, "author": {"login": "x"}}
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
