"""The merge queue: where the base branch takes changes only through GitHub's merge queue, the
merge effect queues the PR (the converged head as `expectedHeadOid`) instead of merging it, and
GitHub merges it once the queue's required checks passed on its merge group.

The PR stays `merging` while it is queued. The effect reads the queue before it enqueues, so an
enqueue whose answer was lost is never made a second time. A step of a `merging` PR with no
merge effect left reads where it stands: queued (its position), merged (the step's own read of
the PR ends the run), or out of the queue unmerged, which goes back to `waiting_merge` with the
reason (the merge group's failing checks) for the merge stage to decide again. See
docs/architecture.md ("Merge stage").
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass

import structlog

from bot.engine.dispatch import requeue
from bot.engine.merge_rounds import queue_removed
from bot.github.errors import GitHubError, RateLimited
from bot.rules.merge import FailedCheck, failed_checks
from bot.rules.words import code
from bot.runtime.context import Runtime
from storage import prs
from storage.keys import PrKey, ProcessKey
from storage.models import PullRequest
from storage.statuses import Status

log = structlog.get_logger(__name__)



@dataclass(frozen=True)
class Queue:
    """What GitHub says of a PR and its base's merge queue (`GitHubClient.merge_queue`)."""

    node_id: str
    state: str  # OPEN | CLOSED | MERGED
    required: bool  # the base takes changes only through its merge queue
    queued: bool
    position: int | None = None
    group: str | None = None  # the merge group's commit


def read_queue(raw: dict) -> Queue:
    entry = raw.get("mergeQueueEntry") or {}
    position = entry.get("position")
    return Queue(node_id=str(raw.get("id") or ""), state=str(raw.get("state") or "OPEN"),
                 required=raw.get("isMergeQueueEnabled") is True,
                 queued=raw.get("isInMergeQueue") is True or bool(entry),
                 position=position if isinstance(position, int) else None,
                 group=_oid(entry.get("headCommit")))


def _oid(commit: object) -> str | None:
    oid = commit.get("oid") if isinstance(commit, dict) else None
    return oid if isinstance(oid, str) and re.fullmatch(r"[0-9a-f]{40,64}", oid) else None


def queued_text(q: Queue) -> str:
    where = f", position {q.position}" if q.position is not None else ""
    group = f" (merge group {q.group})" if q.group else ""
    return f"in the merge queue{where}{group}"


def removal_reason(group: str | None, failing: Sequence[FailedCheck]) -> str:
    """Why a PR left the queue unmerged, as `last_action` says it: the group's failing checks."""
    if group is None:
        return "left the merge queue without merging"
    checks = ", ".join(f"{code(c.name)} {c.conclusion}" for c in failing)
    if checks:
        return f"removed from the merge queue: {checks} on merge group {group[:7]}"
    return f"removed from the merge queue (no failing check on merge group {group[:7]})"


@dataclass(frozen=True)
class QueueStep:
    kind: str  # merge (no queue to go through) | enqueue | queued | back | wait
    reason: str = ""


def decide_effect(q: Queue, first_try: bool) -> QueueStep:
    """The merge effect's move. Not queued on a retry: the lost try may have queued the PR and the
    queue removed it since, so the merge stage decides again rather than queue it blind."""
    if not q.required or q.state != "OPEN":
        return QueueStep("merge")  # run_merge merges, or records the merge, or sees it closed
    if q.queued:
        return QueueStep("queued", queued_text(q))
    if first_try:
        return QueueStep("enqueue")
    return QueueStep("back", "not in the merge queue after an enqueue whose answer was lost")


def decide_settle(q: Queue) -> QueueStep:
    """A `merging` PR's move once its merge effect is done."""
    if not q.required:
        return QueueStep("merge")  # not a queue's: the merge stage's own rule
    if q.state != "OPEN":
        return QueueStep("wait")  # merged or closed since the step's read: its next read ends the run
    if q.queued:
        return QueueStep("queued", queued_text(q))
    return QueueStep("back")


def queue_known(rt: Runtime, pr_key: PrKey) -> bool:
    """Whether a merge in this PR's repository was refused for its merge queue (this process)."""
    return pr_key.full_repo in rt.merge_queue_repos


def learn_queue(rt: Runtime, pr_key: PrKey) -> None:
    rt.merge_queue_repos.add(pr_key.full_repo)


def refused_for_queue(message: str) -> bool:
    """GitHub's 405 to `PUT .../merge` on a branch that takes changes only through its queue."""
    return "merge queue" in message.lower()


async def settle(rt: Runtime, pr: PullRequest, bound) -> bool:
    """A `merging` PR whose merge effect is done, on a base that requires a merge queue: say its
    position while it is queued, and send it back to `waiting_merge` once it left unmerged.
    False when its base has no queue (the merge stage's own rule applies)."""
    key = pr.pr_key
    q = read_queue(await rt.github.pr(key).merge_queue())
    step = decide_settle(q)
    if step.kind == "merge":
        return False
    if step.kind == "queued" and (step.reason, q.group) != (pr.last_action, pr.merge_group):
        await say(rt, pr.pr_key, prs.process_key_of(pr), step.reason, q.group)
    elif step.kind == "back":
        # The group the row kept (GitHub deletes its branch once it is done with it), read now:
        # the merge effect may have recorded it after this step read the row.
        fresh = await prs.get(rt.db, pr.pr_key)
        group = fresh.pr.merge_group if fresh is not None else pr.merge_group
        failing = await _failing(rt, key, group) if group else ()
        reason = removal_reason(group, failing)
        if failing and group:  # (`failing` is read off the group: none without one)
            # Queued again, the same head would fail the same way: the fixer gets the checks.
            if await queue_removed(rt, pr, failing, group, bound):
                bound.info("merge.dequeued", reason=reason, group=group, then="ci round")
        elif await back(rt, pr.pr_key, prs.process_key_of(pr), reason, "dequeued"):
            bound.info("merge.dequeued", reason=reason, group=group)
    return True


async def _failing(rt: Runtime, key, group: str) -> tuple[FailedCheck, ...]:
    """The failed checks (runs and statuses) of the merge group, whichever the queue required."""
    try:
        runs, status = await asyncio.gather(rt.github.pr(key).check_runs(group),
                                            rt.github.pr(key).combined_status(group))
    except RateLimited:
        raise
    except GitHubError as e:
        # The group's commit is gone (GitHub cleans up after a queue) or unreadable: the PR
        # goes back to the merge stage without the reason rather than stay `merging`.
        log.warning("merge.group_checks_unread", group=group, error=str(e))
        return ()
    # A group rebuilt behind a failed one has its runs cancelled: not a failure of this PR.
    return tuple(c for c in failed_checks(runs, status, [])[0] if c.conclusion != "cancelled")


async def say(rt: Runtime, pr_key: PrKey, pk: ProcessKey, text: str, group: str | None) -> bool:
    return await prs.fenced_update(rt.db, pr_key, pk, {"last_action": text, "merge_group": group},
                                   expect_status=Status.MERGING)


async def back(rt: Runtime, pr_key: PrKey, pk: ProcessKey, reason: str, why: str) -> bool:
    """Back to `waiting_merge` with `reason`, and the next step now: the merge stage decides
    again on a fresh read (a moved head is a new round there)."""
    async with rt.db.session() as s:
        won = await prs.fenced_update(None, pr_key, pk, {"status": Status.WAITING_MERGE, "last_action": reason,
                                                         "merge_group": None},
                                      expect_status=Status.MERGING, session=s)
        if won:
            await requeue(s, pr_key, why)
    return won
