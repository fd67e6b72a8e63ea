"""What a reply effect writes on threads it read again (`writes_for`): nothing on a thread gone
or resolved since, only a resolve where our reply is already, and a resolve only when asked."""

from bot.effects.replies import Reply, writes_for
from bot.engine.outbox import reply_marker


def _thread(*bodies: str, resolved: bool = False) -> dict:
    return {"isResolved": resolved, "comments": {"nodes": [{"body": b} for b in bodies]}}


def _writes(threads: dict, *replies: Reply) -> list[tuple[str, str | None, bool]]:
    return [(w.thread_id, w.body, w.resolve) for w in writes_for(threads, replies)]


def test_a_thread_resolved_or_deleted_since_the_round_s_read_gets_nothing():
    threads = {"T1": _thread("why?", resolved=True)}
    assert _writes(threads, Reply("T1", "Fixed.", True), Reply("T2", "Fixed.", True)) == []


def test_a_thread_carrying_our_reply_is_only_resolved_and_only_when_asked():
    threads = {"T1": _thread("why?", f"Needs a maintainer.\n\n{reply_marker('T1')}"), "T2": _thread("why?")}
    assert _writes(threads, Reply("T1", "Fixed.", True)) == [("T1", None, True)]
    # Left open for a maintainer: a retry neither replies again nor resolves it.
    assert _writes(threads, Reply("T1", "Needs a maintainer.", False)) == []
    assert _writes(threads, Reply("T2", "Fixed.", False)) == [("T2", f"Fixed.\n\n{reply_marker('T2')}", False)]
