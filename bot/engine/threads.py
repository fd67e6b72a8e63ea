"""Replying to and resolving review threads, idempotently (the `reply` effect)."""

from __future__ import annotations

import structlog

from bot.prkey import parse_pr_key
from bot.runtime import Runtime

log = structlog.get_logger(__name__)


def reply_marker(thread_id: str) -> str:
    return f"<!-- convergebot:reply:{thread_id} -->"


async def reply_and_resolve(rt: Runtime, pr_key: str, thread_id: str, text: str, *, resolve: bool) -> None:
    """Reply on the thread, then resolve it. A thread already resolved, or already carrying our
    reply (an earlier attempt whose answer was lost), gets nothing posted twice."""
    key = parse_pr_key(pr_key)
    # Read, check and write under the PR's mutation lock: two reply effects for one thread (a
    # retried one of the last round, a new one of this round) must not both find no reply yet.
    async with rt.github.mutating(pr_key):
        current = {t["id"]: t for t in await rt.github.review_threads(key.owner, key.repo, key.number)}
        thread = current.get(thread_id)
        if thread is None or thread.get("isResolved"):
            return
        marker = reply_marker(thread_id)
        bodies = [c.get("body") or "" for c in (thread.get("comments") or {}).get("nodes") or []]
        if not any(marker in b for b in bodies):
            # The reply and the resolve in one request; a retry after a lost answer finds the
            # thread resolved, or finds our marker and only resolves.
            await rt.github.reply_in_thread(thread_id, f"{text}\n\n{marker}", resolve=resolve)
        elif resolve:
            await rt.github.resolve_thread(thread_id)
