"""The merge-stage shell: read dependencies and mergeability, decide, act."""

from __future__ import annotations

import structlog

from bot import outbox
from bot.github.errors import Conflict, NotFound
from bot.prkey import parse_pr_key
from bot.runtime import Runtime
from storage import dependencies, prs, runs
from storage.models import PullRequest, utcnow
from storage.statuses import RunState, Status

from .dispatch import requeue
from .escalation import escalate
from .findings import fingerprint
from .merge import MergeView, decide_merge, find_cycle, parse_dependencies
from .model import Escalate

log = structlog.get_logger(__name__)

MERGE_STATUSES = (Status.WAITING_DEPS, Status.WAITING_MERGE, Status.MERGING)


async def _unmerged(rt: Runtime, deps: list[str]) -> tuple[str, ...]:
    out = []
    for dep in deps:
        view = await prs.get(rt.db, dep)
        if view is not None and view.pr.status == Status.MERGED:
            continue
        key = parse_pr_key(dep)
        try:
            if (await rt.github.pull(key.owner, key.repo, key.number)).get("merged"):
                continue
        except NotFound:
            pass
        out.append(dep)
    return tuple(out)


async def merge_stage(rt: Runtime, pr: PullRequest, gh_pr: dict, bound) -> None:
    key = parse_pr_key(pr.pr_key)
    deps = parse_dependencies(gh_pr.get("body"), key.full_repo)
    await dependencies.replace_for(rt.db, pr.pr_key, deps)
    cycle = find_cycle(pr.pr_key, await dependencies.edges(rt.db)) if deps else None
    view = MergeView(
        status=pr.status, head=pr.head_sha, converged_head=pr.converged_head,
        mergeable_state=gh_pr.get("mergeable_state"),
        unmerged_deps=await _unmerged(rt, deps) if pr.status == Status.WAITING_DEPS else (),
        cycle=tuple(cycle) if cycle else None,
        require_approval=rt.config.merge.require_approval, approved=pr.merge_approved,
    )
    step = decide_merge(view)
    pk = pr.process_key
    if step.kind == "back_to_waiting" and await outbox.pending(rt.db, pr.pr_key, "merge"):
        return  # the merge effect is still trying: it alone settles `merging`
    fence = dict(expect_status=pr.status, expect_round=pr.current_round)
    async with rt.db.session() as s:
        if step.kind == "wait":
            await prs.fenced_update(None, pr.pr_key, pk, {"last_action": step.reason}, **fence, session=s)
        elif step.kind == "new_round":
            if await prs.fenced_update(None, pr.pr_key, pk, {
                    "status": Status.CONVERGING, "current_round": pr.current_round + 1, "husk_retries": 0,
                    "converged_head": None, "converged_at": None, "last_action": step.reason}, **fence, session=s):
                await requeue(s, pr.pr_key, "new_round")  # the stage changed: its next step now
        elif step.kind in ("to_merge", "back_to_waiting"):
            if await prs.fenced_update(None, pr.pr_key, pk, {"status": Status.WAITING_MERGE,
                                                             "last_action": step.reason}, **fence, session=s):
                await requeue(s, pr.pr_key, "waiting_merge")
        elif step.kind == "escalate":
            await escalate(s, rt, pr, Escalate("merge", f"convergebot cannot merge: {step.reason}.",
                                               fingerprint("merge", step.reason)), expect_status=pr.status)
        elif step.kind == "update_branch":
            won = await prs.fenced_update(None, pr.pr_key, pk, {"last_action": "updating the branch from its base"},
                                          **fence, session=s)
            if won and rt.config.merge.update_branch:
                await outbox.update_branch(s, pr.pr_key, pk, pr.head_sha or "")
        elif step.kind == "merge":
            # `merging` and the merge effect commit together; the effect re-reads the PR before
            # every try, so a merge whose answer was lost is never made blind a second time.
            if await prs.fenced_update(None, pr.pr_key, pk, {"status": Status.MERGING, "last_action": "merging"},
                                       expect_status=Status.WAITING_MERGE, expect_round=pr.current_round, session=s):
                await outbox.merge(s, pr.pr_key, pk, pr.converged_head, pr.current_round)
                bound.info("merge.queued", head=pr.converged_head)


async def run_merge(rt: Runtime, pr_key: str, pk: str, sha: str) -> None:
    """The merge effect: re-read, then merge with `sha` as the precondition, and record it."""
    key = parse_pr_key(pr_key)
    bound = log.bind(pr_key=pr_key, process_key=pk)
    method = rt.config.merge.method
    # Re-read before every try: a try whose answer was lost (GitHub merged, then answered 502)
    # is retried, and a blind second PUT would be refused (405) and taken for a refusal.
    gh_pr = await rt.github.pull(key.owner, key.repo, key.number)
    if not gh_pr.get("merged"):
        if gh_pr.get("state") != "open":
            return  # closed meanwhile: the next step ends the run
        try:
            # The converged head is the precondition: GitHub refuses (409) if anything else landed.
            await rt.github.merge(key.owner, key.repo, key.number, sha, method)
        except Conflict as e:
            # Refused (the head moved): the push's own webhook came while we were `merging`, so
            # the next step is queued here, or the new head would wait for the next poll.
            async with rt.db.session() as s:
                if await prs.fenced_update(None, pr_key, pk, {"status": Status.WAITING_MERGE,
                                                              "last_action": f"merge refused: {e}"},
                                           expect_status=Status.MERGING, session=s):
                    await requeue(s, pr_key, "merge_refused")
            bound.info("merge.refused", error=str(e))
            return
        # Unavailable propagates: the job retries, and its next try re-reads before merging.
    async with rt.db.session() as s:
        won = await prs.fenced_update(None, pr_key, pk, {
            "status": Status.MERGED, "merged_at": utcnow(), "outcome": "merged",
            "last_action": f"merged ({method})"}, expect_status=Status.MERGING, session=s)
        if won:
            await runs.end_run(None, pk, RunState.COMPLETED, "merged", session=s)
            await outbox.check_run(s, pr_key)
            # PRs waiting on this one move now, not at the next poll.
            for dependent in await dependencies.dependents(s, pr_key):
                await requeue(s, dependent, "dependency_merged")
    bound.info("pr.merged", head=sha)
