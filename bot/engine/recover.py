"""Commands whose webhook never came, found on an escalated PR by the poller's read.

An escalated PR waits for a maintainer's comment; if that comment's delivery is lost (dropped,
or sent while the bot was restarting) the run would wait for ever. So each step of an escalated
PR lists the comments since the escalation (a conditional read: free while nothing changed)
and queues a `command` job for every command not handled yet, under the same key its webhook
would have used, so a command is still handled once.
"""

from __future__ import annotations

from datetime import timedelta

import structlog

from bot.rules.commands import edited, looks_like_command
from bot.runtime.context import Runtime
from storage import commands, jobs
from storage.models import PullRequest
from storage.statuses import JobKind

log = structlog.get_logger(__name__)

# GitHub stamps comments to the second, and clocks differ: look a little before the escalation.
SLACK = timedelta(minutes=1)


async def recover_commands(rt: Runtime, pr: PullRequest) -> int:
    if pr.escalated_at is None:
        return 0
    key = pr.pr_key
    since = pr.escalated_at - SLACK
    found = await rt.github.pr(key).issue_comments(since=since)
    handled = {c.comment_id for c in await commands.for_pr(rt.db, pr.pr_key)}
    queued = 0
    async with rt.db.session() as s:
        for comment in found:
            cid, user = comment.get("id"), comment.get("user") or {}
            if not isinstance(cid, int) or cid in handled or user.get("type") == "Bot":
                continue
            if not looks_like_command(comment.get("body")):
                continue
            if edited(comment):
                continue  # edited: only a comment as it was created is a command, never an edit
            _, created = await jobs.enqueue_in(s, rt.db.is_postgres, JobKind.COMMAND, f"cmd:{cid}", pr_key=pr.pr_key,
                                               payload={"comment_id": cid, "kind": "issue"})
            queued += created
    if queued:
        log.info("command.recovered", pr_key=pr.pr_key, commands=queued)
    return queued
