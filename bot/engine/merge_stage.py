"""The merge-stage shell: read dependencies and mergeability, decide, act."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import structlog

from bot.engine import merge_queue as mergequeue
from bot.engine import outbox, repoconfig, stacks
from bot.engine.dispatch import requeue
from bot.engine.escalation import escalate
from bot.engine.merge_rounds import fix_round
from bot.github.errors import GitHubError, NotFound, RateLimited
from bot.rules.findings import fingerprint
from bot.rules.merge import (
    MERGEABLE_NOW,
    FailedCheck,
    MergeStep,
    MergeView,
    ReviewsWanted,
    checks_wait_began,
    decide_merge,
    failed_checks,
    find_cycle,
    parse_dependencies,
    reviews_wanted,
    unreported,
)
from bot.rules.model import Escalate
from bot.runtime.context import Runtime
from storage import dependencies, prs, rounds
from storage.keys import PrKey
from storage.models import PullRequest, utcnow
from storage.statuses import RoundKind, Status

log = structlog.get_logger(__name__)

MERGE_STATUSES = (Status.WAITING_DEPS, Status.WAITING_MERGE, Status.MERGING)
# "unknown" mergeability is looked at again after the time it has lasted, within these bounds.
UNKNOWN_MIN_DELAY, UNKNOWN_MAX_DELAY = 2.0, 60.0
ANNOTATIONS_SHOWN = 10  # of a failed check run's annotations
# Merges (or merge-queue entries) a run makes before it escalates instead of trying again: each
# was refused, or left the queue with nothing the fixer could be given.
MERGE_TRIES = 5


async def _unmerged(rt: Runtime, deps: Sequence[PrKey], landed: Mapping[PrKey, bool]) -> tuple[PrKey, ...]:
    """Those of `deps` not merged: `landed` says for those just read from GitHub (a stack's
    parents), the row or a read says for the others."""
    out = []
    for dep in deps:
        if dep in landed:
            if not landed[dep]:
                out.append(dep)
            continue
        view = await prs.get(rt.db, dep)
        if view is not None and view.pr.status == Status.MERGED:
            continue
        try:
            if (await rt.github.pr(dep).read()).get("merged"):
                continue
        except NotFound:
            pass
        out.append(dep)
    return tuple(out)


async def merge_stage(rt: Runtime, pr: PullRequest, gh_pr: dict, bound) -> None:
    """The merge stage's step from `gh_pr`, the PR as just read. A PR whose dependencies are all
    merged goes on at once, in this job and from the same read, to its decision as `waiting
    merge`: another sync would only read the same PR again a moment later. A crash between the
    two leaves the job unfinished, so it runs again."""
    moved = await _merge_stage(rt, pr, gh_pr, bound)
    if moved is not None:
        await _merge_stage(rt, moved, gh_pr, bound)


async def _merge_stage(rt: Runtime, pr: PullRequest, gh_pr: dict, bound) -> PullRequest | None:
    """One decision of the merge stage; the row as written when it moved on to `waiting merge`
    from `waiting deps`, else None."""
    now = utcnow()
    view = await _read_view(rt, pr, gh_pr, now)
    step = decide_merge(view)
    if step.kind == "fix_round" and step.round_kind == RoundKind.CI:
        # Where the failures point, read only for the fixer.
        view = replace(view, failing_checks=tuple(await asyncio.gather(
            *(_annotated(rt, pr.pr_key, c) for c in view.failing_checks))))
    if step.kind == "back_to_waiting" and await outbox.pending(rt.db, pr.pr_key, "merge", dry_run=rt.config.github.dry_run):
        return None  # the merge effect is still trying: it alone settles `merging`
    if (step.kind == "back_to_waiting" and mergequeue.queue_known(rt, pr.pr_key)
            and await mergequeue.settle(rt, pr, bound)):
        return None  # a merge-queue branch: still queued, or sent back with the queue's reason
    return await _record(rt, pr, step, view, gh_pr, now, bound)


async def _read_view(rt: Runtime, pr: PullRequest, gh_pr: dict, now: datetime) -> MergeView:
    """What the decision reads: the PR as just read, its dependencies (those its body names,
    recorded as it names them now, those given at enrollment, and the PR its base branch heads),
    and what blocks a merge when it is one to make."""
    stacked = await stacks.to_restack(rt, pr, gh_pr) if pr.status == Status.WAITING_DEPS else {}
    deps = await dependencies.replace_for(rt.db, pr.pr_key,
                                          parse_dependencies(gh_pr.get("body"), pr.pr_key.full_repo))
    cycle = find_cycle(pr.pr_key, await dependencies.edges(rt.db)) if deps else None
    state = gh_pr.get("mergeable_state") or "unknown"
    unmerged = await _unmerged(rt, deps, stacked) if pr.status == Status.WAITING_DEPS else ()
    view = MergeView(
        status=pr.status, head=pr.head_sha, converged_head=pr.converged_head,
        mergeable_state=state,
        unmerged_deps=unmerged, restack=tuple(p for p, landed in stacked.items() if landed),
        cycle=tuple(cycle) if cycle else None,
        require_approval=rt.config.merge.require_approval, approved=pr.merge_approved,
        conflict_attempts=rt.config.merge.conflict_attempts, ci_fix_attempts=rt.config.merge.ci_fix_attempts,
        unknown_for=now - (pr.mergeability_unknown_since or now),
        unknown_timeout=timedelta(seconds=rt.config.merge.mergeability_timeout_seconds),
    )
    if (pr.status == Status.WAITING_MERGE and pr.head_sha == pr.converged_head
            and (pr.merge_approved or not rt.config.merge.require_approval)):
        view = await _merge_blockers(rt, pr, gh_pr, view, now)
    return view


async def _record(rt: Runtime, pr: PullRequest, step: MergeStep, view: MergeView, gh_pr: dict,
                  now: datetime, bound: Any) -> PullRequest | None:
    """The step's writes, fenced on the status and round the decision read; the row as written
    when it moved on to `waiting merge` for a merge to decide at once, else None."""
    pk = prs.process_key_of(pr)
    fence: dict[str, Any] = dict(expect_status=pr.status, expect_round=pr.current_round)
    # Since when GitHub has said "unknown": kept while it does, cleared once it says anything.
    unknown = {"mergeability_unknown_since": (pr.mergeability_unknown_since or now)
               if step.kind == "wait_unknown" else None}
    async with rt.db.session() as s:
        if step.kind in ("wait", "wait_unknown"):
            won = await prs.fenced_update(None, pr.pr_key, pk, {"last_action": step.reason, **unknown},
                                          **fence, session=s)
            if won and (due := _checks_due(view)) is not None and due > 0:
                # Nothing on GitHub changes when a check never reports: look again at the deadline.
                await requeue(s, pr.pr_key, "checks_timeout", delay_seconds=due)
            if won and step.kind == "wait_unknown":
                # GitHub computes mergeability after a read asks for it: look again soon, then
                # less often (the delay grows with the wait), until the stall escalates.
                delay = min(max(view.unknown_for.total_seconds(), UNKNOWN_MIN_DELAY), UNKNOWN_MAX_DELAY)
                await requeue(s, pr.pr_key, "mergeability_unknown", delay_seconds=delay)
        elif step.kind == "new_round":
            if await prs.fenced_update(None, pr.pr_key, pk, {
                    "status": Status.CONVERGING, "current_round": pr.current_round + 1, "husk_retries": 0,
                    "converged_head": None, "converged_at": None, "last_action": step.reason, **unknown},
                    **fence, session=s):
                await requeue(s, pr.pr_key, "new_round")  # the stage changed: its next step now
        elif step.kind == "fix_round":
            await fix_round(s, rt, pr, step, view, (gh_pr.get("base") or {}).get("ref") or "", bound)
        elif step.kind in ("to_merge", "back_to_waiting"):
            moved = {"status": Status.WAITING_MERGE, "last_action": step.reason, **unknown}
            if await prs.fenced_update(None, pr.pr_key, pk, moved, **fence, session=s):
                if step.kind == "to_merge":
                    return pr.model_copy(update=moved)  # the caller decides on at once
                await requeue(s, pr.pr_key, "waiting_merge")
        elif step.kind == "escalate":
            await escalate(s, rt, pr, Escalate(step.escalation, f"convergebot cannot merge: {step.reason}.",
                                               fingerprint(step.escalation, step.reason)),
                           expect_status=pr.status, extra=unknown)
        elif step.kind == "restack":
            won = await prs.fenced_update(None, pr.pr_key, pk, {"last_action": step.reason, **unknown},
                                          **fence, session=s)
            for parent in view.restack if won else ():
                await outbox.restack(s, pr.pr_key, pk, parent, pr.head_sha or "")
        elif step.kind == "update_branch":
            won = await prs.fenced_update(None, pr.pr_key, pk, {"last_action": "updating the branch from its base",
                                                                **unknown}, **fence, session=s)
            if won and rt.config.merge.update_branch:
                await outbox.update_branch(s, pr.pr_key, pk, pr.head_sha or "")
        elif step.kind == "merge":
            # `merging` and the merge effect commit together; the effect re-reads the PR before
            # every try, so a merge whose answer was lost is never made blind a second time.
            if pr.converged_head is None:  # the merge stage is a converged PR's: its head is noted
                raise ValueError(f"{pr.pr_key} is in the merge stage with no converged head")
            if await prs.fenced_update(None, pr.pr_key, pk, {"status": Status.MERGING, "last_action": "merging",
                                                             **unknown},
                                       expect_status=Status.WAITING_MERGE, expect_round=pr.current_round, session=s):
                await outbox.merge(s, pr.pr_key, pk, pr.converged_head, pr.current_round)
                bound.info("merge.queued", head=pr.converged_head)
    return None


def _checks_due(view: MergeView) -> float | None:
    """Seconds until the wait for required checks without a result times out, if it is one."""
    if not (view.pending_checks or view.unreported_checks) or view.now is None or view.checks_since is None:
        return None
    return max(0.0, (view.checks_since + view.checks_timeout - view.now).total_seconds())


async def _merge_blockers(rt: Runtime, pr: PullRequest, gh_pr: dict, view: MergeView,
                          now: datetime) -> MergeView:
    """What the decision needs beyond the PR, read only when its state calls for it: the failing
    checks of a blocked (or, with `required_checks`, unstable) PR, the files of a dirty one, and
    the fix rounds the run already spent on either."""
    key = pr.pr_key
    pk = prs.process_key_of(pr)
    state, head = view.mergeable_state, pr.head_sha or ""
    required = (await repoconfig.effective_config(rt, pr.repo)).convergence.required_checks
    since = pr.merge_budget_since
    if state == "blocked" or (state == "unstable" and required):
        runs_, status = await asyncio.gather(rt.github.pr(key).check_runs(head),
                                             rt.github.pr(key).combined_status(head))
        failing, pending = failed_checks(runs_, status, required)
        names: Collection[str] = required
        if not required and (failing or pending or state == "blocked"):
            # No `required_checks` configured: branch protection says which of them block (a
            # failing check it does not require is not what keeps the PR `blocked`), and which
            # have not reported at all.
            protected = await _protected(rt, key, pr.pr_key, head)
            if protected is not None:
                failing = tuple(c for c in failing if c.name in protected)
                pending = tuple(n for n in pending if n in protected)
                names = protected
        view = replace(view, failing_checks=failing, pending_checks=pending,
                       unreported_checks=unreported(runs_, status, names), now=now,
                       checks_since=checks_wait_began(pr.waiting_since, pr.merge_budget_since),
                       checks_timeout=timedelta(seconds=rt.config.merge.checks_timeout_seconds))
        if failing:
            view = replace(view, ci_rounds=await rounds.count_kind(rt.db, pr.pr_key, pk, RoundKind.CI,
                                                                   since))
        elif state == "blocked" and not (pending or view.unreported_checks):
            view = replace(view, reviews_wanted=await _reviews_wanted(rt, key, gh_pr))
    elif state == "dirty":
        base = (gh_pr.get("base") or {}).get("ref") or ""
        try:
            files = await rt.github.pr(key).conflicting_files(base, head)
        except RateLimited:
            raise
        except GitHubError as e:  # a compare GitHub cannot answer: the round still goes ahead
            log.warning("merge.conflicting_files_unread", pr_key=pr.pr_key, error=str(e))
            files = []
        view = replace(view, conflict_files=tuple(files),
                       conflict_rounds=await rounds.count_kind(rt.db, pr.pr_key, pk, RoundKind.CONFLICT,
                                                               since))
    if state in MERGEABLE_NOW:
        view = replace(view, merge_tries=await outbox.count(rt.db, pr.pr_key, "merge", pk, since),
                       merge_attempts=MERGE_TRIES, last_action=pr.last_action)
    return view


async def _reviews_wanted(rt: Runtime, key: PrKey, gh_pr: dict) -> ReviewsWanted | None:
    """Whom a `blocked` PR no check holds back waits on, where GitHub's review decision says
    it wants an approving review; None where it says otherwise, or cannot say."""
    try:
        decision, rule = await rt.github.pr(key).review_requirement()
    except RateLimited:
        raise
    except GitHubError as e:  # e.g. a GitHub Enterprise Server without `reviewDecision`
        log.warning("merge.review_requirement_unread", pr_key=key, error=str(e))
        return None
    return reviews_wanted(gh_pr, rule, key.owner) if decision == "REVIEW_REQUIRED" else None


async def _protected(rt: Runtime, key, pr_key: PrKey, head: str) -> frozenset[str] | None:
    """The checks branch protection requires of the PR at `head` (kept per PR and head: they
    change with the repository's rules, not with every read), None when GitHub cannot say."""
    cache = rt.protected_checks
    if (pr_key, head) in cache:
        cache.move_to_end((pr_key, head))
        return cache[(pr_key, head)]
    try:
        names = frozenset(await rt.github.pr(key).required_checks(head))
    except RateLimited:
        raise
    except GitHubError as e:  # e.g. a GitHub Enterprise Server without `isRequired`: all count
        log.warning("merge.required_checks_unread", pr_key=pr_key, error=str(e))
        return None
    cache[(pr_key, head)] = names  # the least recently used goes past its bound (`Runtime`)
    return names


async def _annotated(rt: Runtime, key, check: FailedCheck) -> FailedCheck:
    """The check with its first annotations (where the failure points in the code), when it has
    any: one read per failing check run, only when a CI round is being decided."""
    if not check.run_id or not check.annotation_count:
        return check
    try:
        found = await rt.github.pr(key).check_run_annotations(check.run_id, limit=ANNOTATIONS_SHOWN)
    except RateLimited:
        raise
    except GitHubError as e:  # the fixer still gets the check without them
        log.warning("merge.annotations_unread", check=check.name, error=str(e))
        return check
    lines = tuple(f"{a.get('path')}:{a.get('start_line')}: {a.get('annotation_level')}: {a.get('message')}"
                  for a in found[:ANNOTATIONS_SHOWN] if isinstance(a, dict))
    return replace(check, annotations=lines)


