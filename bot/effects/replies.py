"""Replying to and resolving review threads, idempotently (the `reply` effect)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import structlog

from bot.engine.outbox import reply_marker
from bot.github.endpoints.reviews import ThreadWrite
from bot.runtime.context import Runtime
from storage.keys import PrKey

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Reply:
    thread_id: str
    text: str
    resolve: bool


def writes_for(threads: dict[str, dict], replies: Sequence[Reply]) -> list[ThreadWrite]:
    """What is left to write on GitHub for `replies`, given the threads as they are now.

    A thread already resolved, or gone, gets nothing; one already carrying our reply (an
    earlier attempt whose answer was lost) is only resolved, if asked. One reply per thread.
    """
    writes: dict[str, ThreadWrite] = {}
    for r in replies:
        thread = threads.get(r.thread_id)
        if r.thread_id in writes or thread is None or thread.get("isResolved"):
            continue
        marker = reply_marker(r.thread_id)
        bodies = [c.get("body") or "" for c in (thread.get("comments") or {}).get("nodes") or [] if c]
        if not any(marker in b for b in bodies):
            writes[r.thread_id] = ThreadWrite(r.thread_id, f"{r.text}\n\n{marker}", r.resolve)
        elif r.resolve:
            writes[r.thread_id] = ThreadWrite(r.thread_id, None, True)
    return list(writes.values())


def as_read(answered: dict[str, bool]) -> dict[str, dict]:
    """The threads as the round read them, for `writes_for`: open, and carrying our reply or not."""
    return {tid: {"isResolved": False, "comments": {"nodes": [{"body": reply_marker(tid)}] if yes else []}}
            for tid, yes in answered.items()}


async def reply_and_resolve(rt: Runtime, pr_key: PrKey, replies: Sequence[Reply],
                            answered: dict[str, bool] | None = None) -> None:
    """Reply on each thread, then resolve it when asked: one GraphQL request for all the
    writes, however many threads.

    `answered` (thread id → our reply was on it) is what the round's own read of the threads
    showed, given only when nothing of ours can have written to them since (`bot/effects/runner.py`):
    then the writes follow from it, with no read. Otherwise, and on every retry (a lost answer,
    a write GitHub refused halfway), the threads are read first and only what is still missing
    is written. A thread someone resolved since the round's read still gets its reply (and a
    resolve GitHub takes as a no-op); one deleted since makes the write fail, and the retry reads.
    """
    key = pr_key
    # Read, check and write under the PR's mutation lock: two reply effects for one thread (a
    # retried one of the last round, a new one of this round) must not both find no reply yet.
    async with rt.github.pr(pr_key).mutating():
        if answered is not None:
            current = as_read(answered)
        else:
            current = {t["id"]: t for t in await rt.github.pr(key).review_threads()}
        await rt.github.pr(key).write_threads(writes_for(current, replies))
