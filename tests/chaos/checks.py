"""What the bot promises, checked at the end of a chaos run; each failure says what happened.

- every PR ends as its script says: merged; an escalating PR only after its question was
  answered; nothing else escalates; a dependent merges after its dependency;
- nothing done twice on GitHub (the simulator's duplicate writes), no review request repeated
  within a round, no forced (non-fast-forward) push, an author's commit never overwritten;
- the liveness watchdog healed nothing and the process never died on its own.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from storage import escalations, rounds

from .plan import COPILOT, REPO, PrPlan

if TYPE_CHECKING:
    from .harness import ChaosRun

REVIEW_REQUESTS = ("copilot_review_requested", "review_requested")


async def check_promises(run: ChaosRun) -> None:
    await run.read_views()
    effects = run.sim.side_effects
    merged_at = {}  # PR -> position of its (first) merge among the writes
    for i, e in enumerate(effects):
        if e["kind"] == "merge":
            merged_at.setdefault(e["number"], i)
    for p in run.plans:
        await _check_pr(run, p, merged_at, [e for e in effects if e["kind"] in REVIEW_REQUESTS
                                            and e.get("number") == p.number])
    run.duplicates = run.chaos.duplicates()
    run.forced = run.chaos.forced_pushes()
    if run.duplicates:
        run.fail(f"{len(run.duplicates)} write(s) done twice on GitHub: {run.duplicates[:10]}")
    if run.forced:
        run.fail(f"{len(run.forced)} forced (non-fast-forward) push(es): {run.forced[:10]}")
    if run.heals:
        run.fail(f"the liveness watchdog healed {run.heals:g} PR(s)")
    if run.crashes:
        run.fail(f"the bot exited by itself {len(run.crashes)} time(s): codes {run.crashes}")


async def _check_pr(run: ChaosRun, p: PrPlan, merged_at: dict[int, int], asked: list[dict]) -> None:
    where = f"#{p.number} ({p.kind}, reviews {list(p.threads)})"
    status, view = run.status_of(p), run.views.get(p.key)
    esc = await escalations.for_pr(run.db, p.key)
    pr_rounds = await rounds.for_pr(run.db, p.key)
    run.rounds_of[p.number] = len(pr_rounds)
    if status != "merged":
        why = [f"{where} ended {status!r} (last action {view and view.pr.last_action!r})"]
        if p.number in run.stalled:
            why.append(run.stalled[p.number])
        if p.number in run.unexpected:
            why.append(f"unanswered escalations: {run.unexpected[p.number]}")
        if p.kind == "escalate":
            why.append(_answer_evidence(run, p))
        why.append(_round_story(run, p, pr_rounds))
        run.fail("; ".join(why) + "; wanted merged")
    if p.kind == "escalate" and not any(e.kind == "needs_input" and e.status == "answered"
                                        for e in esc):
        found = [(e.id, e.kind, e.status) for e in esc]
        run.fail(f"{where}: no answered needs_input escalation (escalations {found}, "
                 f"maintainer answered {run.answered.get(p.number)})")
    if p.kind != "escalate" and esc:
        run.fail(f"{where}: escalated though its script never asks: "
                 f"{[(e.kind, e.status, e.question[:80]) for e in esc]}")
    if p.kind == "husk" and not (run.signals / f"husked-{p.number}").exists():
        run.fail(f"{where}: the fixer never ran in round 1, so it never husked")
    if p.kind == "author_push":
        await _check_author_push(run, p, where)
    if p.depends_on is not None and p.number in merged_at:
        if merged_at.get(p.depends_on, len(run.sim.side_effects)) > merged_at[p.number]:
            run.fail(f"{where} merged before its dependency #{p.depends_on}")
    # A restored backup forgets the rounds begun since it was taken; the bot asked for their
    # reviews all the same, and a round it begins anew on another head asks again: a request a
    # round. The same round begun again on the same head asking twice is what this catches.
    began = {(r.process_key, r.round_no, r.entry_head) for r in pr_rounds} | run.forgotten_rounds.get(p.key, set())
    if len(asked) > max(len(began), 1):
        run.fail(f"{where}: {len(asked)} review requests for {len(pr_rounds)} round(s): "
                 + _request_evidence(run, p, asked, pr_rounds))


async def _check_author_push(run: ChaosRun, p: PrPlan, where: str) -> None:
    sha = run.author_pushes.get(p.number)
    if sha is None:
        run.fail(f"{where}: the fixer never ran in round 1, so the author never pushed")
        return
    repo, pr = run.sim.pr(REPO, p.number)
    head = await run.sim.head_sha(repo, pr)
    if not await run.sim.git.is_ancestor(repo.git_dir, sha, head):
        run.fail(f"{where}: the author's commit {sha[:10]} is not in the final head {head[:10]}: "
                 "it was overwritten")


def _answer_evidence(run: ChaosRun, p: PrPlan) -> str:
    """What became of the maintainer's answers: the webhook deliveries that carried them."""
    if not run.answered.get(p.number):
        return "no escalation comment appeared for the maintainer to answer"
    fates = []
    for d in run.sim.deliveries:
        if d.event == "issue_comment" and p.answer_token.encode() in d.body:
            fates.append("dropped by chaos" if d.dropped else
                         ", ".join(str(a.status or a.error) for a in d.attempts) or "not sent")
    return f"answer comment deliveries: {fates}"


def _request_evidence(run: ChaosRun, p: PrPlan, asked: list[dict], pr_rounds: list) -> str:
    """When each request was made, when each round started, when the reviewer answered."""
    _, pr = run.sim.pr(REPO, p.number)
    reviews = [r for r in (run.sim.state.reviews[i] for i in pr.review_ids) if r.user == COPILOT]
    return (f"requested at {[e['at'][11:23] for e in asked]}; rounds started at "
            f"{[(r.round_no, r.started_at.isoformat()[11:23]) for r in pr_rounds]}; "
            f"{len(reviews)} Copilot review(s) at "
            f"{[r.submitted_at.isoformat()[11:23] for r in reviews]}")


def _round_story(run: ChaosRun, p: PrPlan, pr_rounds: list) -> str:
    """Each round as the bot recorded it, and each review as the simulator gave it: what a
    round's findings came from, when a PR ended otherwise than scripted."""
    _, pr = run.sim.pr(REPO, p.number)
    rounds_ = [(r.round_no, r.attempt, r.status, r.review_id, len(json.loads(r.findings or "[]")),
                (r.entry_head or "")[:7], (r.exit_head or "")[:7], r.started_at.strftime("%H:%M:%S.%f")[:12])
               for r in pr_rounds]
    reviews = [(r.id, r.user, r.state, r.commit_id[:7], r.submitted_at.strftime("%H:%M:%S"))
               for r in (run.sim.state.reviews[i] for i in pr.review_ids)]
    return (f"rounds (no, attempt, status, review, findings, entry, exit, started) {rounds_}; "
            f"reviews (id, user, state, commit, at) {reviews}")
