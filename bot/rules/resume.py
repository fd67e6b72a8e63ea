"""How a run resumes once a maintainer answers an escalation (pure)."""

from __future__ import annotations

# review: wait for a fresh review again; next_round: the round ended, start the next one;
# rerun: the fixer runs the same round again with the answer as an instruction; merge_stage:
# back to the merge stage (dependencies, then mergeability), its budgets counted afresh.
RESUME = {
    "review_stalled": "review",
    "round_cap": "next_round",
    "churn": "next_round",
    "husk": "rerun",
    "no_advance": "rerun",
    "needs_input": "rerun",
    "blocked": "rerun",
    "fork": "rerun",  # the fix job again: a branch fixed meanwhile goes to the next round
    "agent_budget": "rerun",  # the fix job again, its spend counted from the answer
    "runaway": "review",
    "merge": "merge_stage",  # a dependency cycle, merge tries that did not merge
    "conflict": "merge_stage",
    "ci": "merge_stage",
    "mergeability": "merge_stage",
    "checks_missing": "merge_stage",  # the checks' wait counts afresh from the answer
    # A clean review's checks never reported: the answer asks the review of the head again (the
    # wait starts afresh, and a fresh review with the checks green converges).
    "review_checks": "review",
}

ROUND_CAP_EXTENSION = 2


def resume_plan(kind: str, *, mid_fix: bool = False) -> str:
    """How the answer to an escalation of `kind` resumes the run. `mid_fix`: the round was at
    the fixer when the run was paused (a write budget pauses a run at any moment, also while its
    fixer works or after it pushed, the push's progress check lost to the pause): a plan that
    would ask for a review goes back to the fixer's round instead (`fixing`), whose check of
    the branch decides, as if the pause had not come."""
    plan = RESUME.get(kind, "rerun")
    return "fixing" if plan == "review" and mid_fix else plan
