"""The merge effects: merge with the converged head as the precondition (or, where the base
takes changes only through a merge queue, queue the PR with it as the expected head), and
update a branch that is behind its base with its head as the precondition."""

from __future__ import annotations

import structlog

from bot import metrics
from bot.engine import merge_queue, outbox, repoconfig
from bot.engine.dispatch import requeue, wake_dependents
from bot.engine.outbox import first_try
from bot.github.errors import Conflict
from bot.runtime.context import Runtime
from storage import prs, runs
from storage.keys import PrKey, ProcessKey
from storage.models import Job, utcnow
from storage.statuses import RunState, Status

log = structlog.get_logger(__name__)


async def update_branch(rt: Runtime, job: Job, p: dict) -> None:
    key = prs.pr_key_of(job)
    try:
        # `expected_head_sha` makes a repeat harmless: once the base is merged in, the head
        # moved and GitHub refuses (422) instead of merging again.
        await rt.github.pr(key).update_branch(p["expected_head"])
    except Conflict as e:
        log.info("merge.update_branch_refused", pr_key=job.pr_key, error=str(e))


async def merge(rt: Runtime, job: Job, p: dict) -> None:
    # A base that takes changes only through a merge queue gets the PR queued instead. Whether
    # it does is learnt from GitHub's refusal of the merge (405), then kept for the repository,
    # so a repository without a queue pays no read of it.
    first = first_try(job)
    pr_key, pk = prs.pr_key_of(job), prs.process_key_of(job)  # a merge is its run's (`outbox.merge`)
    if merge_queue.queue_known(rt, pr_key) and await run_enqueue(rt, pr_key, pk, p["sha"], first_try=first):
        return
    if await run_merge(rt, pr_key, pk, p["sha"]) == "merge_queue":
        await run_enqueue(rt, pr_key, pk, p["sha"], first_try=first)


async def run_merge(rt: Runtime, pr_key: PrKey, pk: ProcessKey, sha: str) -> str | None:
    """The merge effect: re-read, then merge with `sha` as the precondition, and record it.
    "merge_queue" when GitHub refused because the base takes changes only through its merge
    queue (the caller queues the PR instead)."""
    key = pr_key
    bound = log.bind(pr_key=pr_key, process_key=pk)
    method = (await repoconfig.effective_config(rt, key.full_repo)).merge.method
    # Re-read before every try: a try whose answer was lost (GitHub merged, then answered 502)
    # is retried, and a blind second PUT would be refused (405) and taken for a refusal.
    gh_pr = await rt.github.pr(key).read()
    if not gh_pr.get("merged"):
        if gh_pr.get("state") != "open":
            return None  # closed meanwhile: the next step ends the run
        try:
            # The converged head is the precondition: GitHub refuses (409) if anything else landed.
            await rt.github.pr(key).merge(sha, method)
        except Conflict as e:
            if merge_queue.refused_for_queue(str(e)):
                merge_queue.learn_queue(rt, pr_key)
                return "merge_queue"
            # Refused (the head moved): the push's own webhook came while we were `merging`, so
            # the next step is queued here, or the new head would wait for the next poll.
            async with rt.db.session() as s:
                if await prs.fenced_update(None, pr_key, pk, {"status": Status.WAITING_MERGE,
                                                              "last_action": f"merge refused: {e}"},
                                           expect_status=Status.MERGING, session=s):
                    await requeue(s, pr_key, "merge_refused")
            bound.info("merge.refused", error=str(e))
            return None
        # Unavailable propagates: the job retries, and its next try re-reads before merging.
    async with rt.db.session() as s:
        won = await prs.fenced_update(None, pr_key, pk, {
            "status": Status.MERGED, "merged_at": utcnow(), "outcome": "merged",
            "last_action": f"merged ({method})"}, expect_status=Status.MERGING, session=s)
        if won:
            await runs.end_run(None, pk, RunState.COMPLETED, "merged", session=s)
            await outbox.check_run(s, pr_key)
            await wake_dependents(s, pr_key)
    metrics.merged("merge", won)
    bound.info("pr.merged", head=sha)
    return None


async def run_enqueue(rt: Runtime, pr_key: PrKey, pk: ProcessKey, sha: str, *, first_try: bool) -> bool:
    """The merge effect where the base requires a merge queue: queue the PR with `sha` as its
    expected head, and record where it stands. False when there is no queue to go through (or
    the PR merged or closed): `run_merge` carries on."""
    key = pr_key
    q = merge_queue.read_queue(await rt.github.pr(key).merge_queue())
    step = merge_queue.decide_effect(q, first_try)
    if step.kind == "merge":
        return False
    if step.kind == "enqueue":
        try:
            entry = await rt.github.pr(key).enqueue(q.node_id, sha)
        except Conflict as e:
            # Refused (the head moved since the convergence, the PR cannot be queued): the
            # merge stage decides again on a fresh read.
            await merge_queue.back(rt, pr_key, pk, f"enqueue refused: {e}", "enqueue_refused")
            log.info("merge.enqueue_refused", pr_key=pr_key, error=str(e))
            return True
        if entry is None:
            return True  # out of the queue already: the step that follows its webhooks reads how
        q = merge_queue.read_queue({"id": q.node_id, "state": q.state, "isMergeQueueEnabled": True,
                        "isInMergeQueue": True, "mergeQueueEntry": entry})
        step = merge_queue.QueueStep("queued", merge_queue.queued_text(q))
        log.info("merge.enqueued", pr_key=pr_key, head=sha, position=q.position, group=q.group)
    if step.kind == "queued":
        await merge_queue.say(rt, pr_key, pk, step.reason, q.group)
    else:
        await merge_queue.back(rt, pr_key, pk, step.reason, "enqueue_unconfirmed")
    return True
