"""The merge stage's own rounds: a conflict or CI round handed straight to the fixer, for the
merge stage (a PR that conflicts or fails its required checks) and for the merge queue (a PR it
took out for checks that failed on its merge group)."""

from __future__ import annotations

from bot.engine.dispatch import new_attempt, queue_fixer
from bot.engine.escalation import escalate
from bot.engine.read import findings_json
from bot.rules.findings import fingerprint
from bot.rules.merge import FailedCheck, MergeStep, MergeView, ci_step, fix_findings
from bot.rules.model import Escalate
from bot.runtime.context import Runtime
from storage import prs, rounds
from storage.models import PullRequest, utcnow
from storage.statuses import RoundKind, Status


async def queue_removed(rt: Runtime, pr: PullRequest, failing: tuple[FailedCheck, ...], group: str,
                        bound) -> bool:
    """A PR the merge queue took out for checks that failed on its merge group: queueing the same
    head again would fail the same way, so the checks go to the fixer in a CI round (within the
    budget), then escalate. False when the fence lost (the run or the stage moved on)."""
    used = await rounds.count_kind(rt.db, pr.pr_key, prs.process_key_of(pr), RoundKind.CI, pr.merge_budget_since)
    step = ci_step(failing, used, rt.config.merge.ci_fix_attempts, f" on merge group {group[:7]}")
    view = MergeView(status=pr.status, head=pr.head_sha, converged_head=pr.converged_head, mergeable_state=None,
                     unmerged_deps=(), cycle=None, require_approval=False, approved=True, failing_checks=failing)
    async with rt.db.session() as s:
        if step.kind == "fix_round":
            return await fix_round(s, rt, pr, step, view, "", bound)
        return await escalate(s, rt, pr, Escalate("ci", f"convergebot cannot merge: {step.reason}.",
                                                  fingerprint("ci", step.reason)),
                              expect_status=pr.status) is not None


async def fix_round(s, rt: Runtime, pr: PullRequest, step: MergeStep, view: MergeView, base: str, bound) -> bool:
    """A conflict or CI round: the next round, handed straight to the fixer with what blocks the
    merge as its findings; the fresh review of what it pushes is the round after. Fenced on the
    status the caller read (`waiting_merge`, or `merging` for a PR the merge queue took out)."""
    now, n, head = utcnow(), pr.current_round + 1, pr.head_sha or ""
    pk, kind = prs.process_key_of(pr), step.round_kind
    if kind is None:  # a fix_round step names its kind (`bot/rules/merge.py`)
        raise ValueError(f"a fix round of {pr.pr_key} of no kind: {step!r}")
    findings = fix_findings(step, view, base)
    text = findings_json(findings)
    if not await prs.fenced_update(None, pr.pr_key, pk, {
            "status": Status.CONVERGING, "current_round": n, "husk_retries": 0, "converged_head": None,
            "converged_at": None, "last_round_head": head, "mergeability_unknown_since": None,
            "last_action": f"{step.round_kind} round: {step.reason}"},
            expect_status=pr.status, expect_round=pr.current_round, session=s):
        return False
    await rounds.start(s, pr.pr_key, pk, n, head, kind=kind)
    attempt = await new_attempt(s, pr.pr_key, pk, n, {
        "findings": text, "fixer": rt.config.fixer.kind, "fixer_started_at": now, "instructions": "[]"})
    moved = pr.model_copy(update={"current_round": n, "last_round_head": head, "status": Status.CONVERGING})
    await queue_fixer(s, rt, moved, n, attempt, text, [], kind=kind, base_branch=base)
    bound.info("merge.fix_round", kind=step.round_kind, round=n, reason=step.reason)
    return True
