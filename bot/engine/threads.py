"""Replying to and resolving review threads, idempotently."""

from __future__ import annotations

from collections.abc import Iterable

import structlog

from bot.fixers.base import Finding
from bot.github.errors import GitHubError
from bot.prkey import parse_pr_key
from bot.runtime import Runtime

log = structlog.get_logger(__name__)


async def reply_and_resolve(rt: Runtime, pr_key: str, finding: Finding, text: str, *, resolve: bool) -> None:
    """Reply on the thread, then resolve it. A thread already resolved was handled by an earlier
    attempt of this job, so nothing is posted twice."""
    if not finding.thread_id or not finding.comment_id:
        return
    key = parse_pr_key(pr_key)
    current = {t["id"]: t for t in await rt.github.review_threads(key.owner, key.repo, key.number)}
    thread = current.get(finding.thread_id)
    if thread is None or thread.get("isResolved"):
        return
    marker = f"<!-- convergebot:reply:{finding.thread_id} -->"
    bodies = [c.get("body") or "" for c in (thread.get("comments") or {}).get("nodes") or []]
    try:
        if not any(marker in b for b in bodies):
            await rt.github.reply_to_thread(key.owner, key.repo, key.number, finding.comment_id,
                                            f"{text}\n\n{marker}")
        if resolve:
            await rt.github.resolve_thread(finding.thread_id)
    except GitHubError as e:
        log.warning("thread.reply_failed", pr_key=pr_key, thread=finding.thread_id, error=str(e))
        raise


async def decline_threads(rt: Runtime, pr_key: str, declines: Iterable[tuple[Finding, str]]) -> None:
    for finding, text in declines:
        await reply_and_resolve(rt, pr_key, finding, text, resolve=True)
