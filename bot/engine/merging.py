"""The merge-stage shell: read dependencies and mergeability, decide, act."""

from __future__ import annotations

from bot.github.errors import Conflict, GitHubError, NotFound, Unavailable
from bot.prkey import parse_pr_key
from bot.runtime import Runtime
from storage import dependencies, prs, runs
from storage.models import PullRequest, utcnow
from storage.statuses import RunState, Status

from .findings import fingerprint
from .merge import MergeView, decide_merge, find_cycle, parse_dependencies
from .model import Escalate

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
    from .step import escalate

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
    fence = dict(expect_status=pr.status, expect_round=pr.current_round)
    if step.kind == "wait":
        await prs.fenced_update(rt.db, pr.pr_key, pk, {"last_action": step.reason}, **fence)
    elif step.kind == "new_round":
        await prs.fenced_update(rt.db, pr.pr_key, pk, {
            "status": Status.CONVERGING, "current_round": pr.current_round + 1, "husk_retries": 0,
            "converged_head": None, "converged_at": None, "last_action": step.reason}, **fence)
    elif step.kind in ("to_merge", "back_to_waiting"):
        await prs.fenced_update(rt.db, pr.pr_key, pk, {"status": Status.WAITING_MERGE, "last_action": step.reason},
                                **fence)
    elif step.kind == "escalate":
        await escalate(rt, pr, Escalate("merge", f"convergebot cannot merge: {step.reason}.",
                                        fingerprint("merge", step.reason)), bound, expect_status=pr.status)
    elif step.kind == "update_branch":
        if rt.config.merge.update_branch:
            try:
                await rt.github.update_branch(key.owner, key.repo, key.number, pr.head_sha or "")
            except GitHubError as e:
                bound.warning("merge.update_branch_failed", error=str(e))
        await prs.fenced_update(rt.db, pr.pr_key, pk, {"last_action": "updating the branch from its base"}, **fence)
    elif step.kind == "merge":
        await _merge(rt, pr, bound)


async def _merge(rt: Runtime, pr: PullRequest, bound) -> None:
    key = parse_pr_key(pr.pr_key)
    pk = pr.process_key
    if not await prs.fenced_update(rt.db, pr.pr_key, pk, {"status": Status.MERGING, "last_action": "merging"},
                                   expect_status=Status.WAITING_MERGE, expect_round=pr.current_round):
        return
    try:
        # The converged head is the precondition: GitHub refuses (409) if anything else landed.
        await rt.github.merge(key.owner, key.repo, key.number, pr.converged_head, rt.config.merge.method)
    except Conflict as e:
        await prs.fenced_update(rt.db, pr.pr_key, pk, {"status": Status.WAITING_MERGE,
                                                       "last_action": f"merge refused: {e}"},
                                expect_status=Status.MERGING)
        return
    except Unavailable as e:
        # Never retried blindly: the merge may have happened. The next step re-reads the PR.
        bound.warning("merge.unconfirmed", error=str(e))
        return
    async with rt.db.session() as s:
        won = await prs.fenced_update(None, pr.pr_key, pk, {
            "status": Status.MERGED, "merged_at": utcnow(), "outcome": "merged",
            "last_action": f"merged ({rt.config.merge.method})"}, expect_status=Status.MERGING, session=s)
        if won:
            await runs.end_run(None, pk, RunState.COMPLETED, "merged", session=s)
    bound.info("pr.merged", head=pr.converged_head)
