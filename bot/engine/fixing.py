"""The fix job: run the fixer for one round attempt, then record its verdict and what it decided.

Two steps that fail apart: what comes before the agent (reading the PR, a token) raises and is
retried by the job layer without counting as a husk; once the agent has run, its verdict, the
thread replies it asks for (outbox effects, retried on their own) and the progress-check are
written in one transaction, so a 5xx after the push re-sends the replies, never the agent.
A PR from a fork the fixer may not touch (forks.py) is escalated instead, before anything is cloned.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import structlog
from sqlalchemy import update
from sqlmodel import col

from bot import metrics
from bot.engine import check_summary, outbox, repoconfig, spending
from bot.engine.dispatch import queue_progress, requeue
from bot.engine.escalation import escalate
from bot.engine.read import findings_of
from bot.fixers.base import FixRequest, ThreadAction, Verdict
from bot.github.errors import NotFound
from bot.rules.findings import fingerprint, settled_json, settlements, threads_of
from bot.rules.forks import fork_refusal
from bot.rules.model import Escalate, Finding
from bot.runtime.context import Runtime
from bot.runtime.workers import Reschedule
from storage import prs, rounds
from storage.database import Database
from storage.jobs import JobStatus
from storage.keys import PrKey, ProcessKey
from storage.models import Job, PullRequest, Round, utcnow
from storage.statuses import JobKind, Status

log = structlog.get_logger(__name__)


async def fix(rt: Runtime, job: Job) -> None:
    attempt = json.loads(job.payload).get("attempt", 0)
    # A fix job is its run's, of one round (`dispatch.queue_fixer`).
    pr_key, pk, n = prs.pr_key_of(job), prs.process_key_of(job), prs.round_of(job)
    bound = log.bind(pr_key=pr_key, process_key=pk, round=n, attempt=attempt)
    found = await _open_round(rt, pr_key, pk, n, attempt)
    if found is None:
        bound.info("fix.not_applicable")
        return
    pr, rnd = found
    key = pr.pr_key
    gh_pr = await rt.github.pr(key).read()
    if gh_pr.get("state") != "open":
        # Closed or merged while the job waited, its webhook not in yet (or lost): nothing is
        # run or pushed, and a sync ends the run as it reads the PR.
        async with rt.db.session() as s:
            await requeue(s, key, f"fix-on-closed:{job.id}", once=True)
        bound.info("fix.pr_not_open", state=gh_pr.get("state"), merged=bool(gh_pr.get("merged")))
        return
    head_repo = (gh_pr.get("head") or {}).get("repo") or {}  # a fork's, for a PR from a fork
    branch = gh_pr["head"]["ref"]
    findings = findings_of(rnd.findings) or ()
    refusal = fork_refusal(gh_pr, rt.config.fixer.allow_forks)
    moved = None
    if head_repo:
        now_at = await _branch_head(rt, head_repo["full_name"], branch, key.full_repo)
        moved = now_at if now_at not in (None, rnd.entry_head) else None
    # A try of this job ran before and the branch moved: most likely that try pushed and died
    # before its verdict was recorded, and with it the replies to the round's threads. Left so,
    # those threads stay open and unanswered and the next review's round takes them up again as
    # findings (a round more, and a false churn escalation). So the fixer runs again, on the
    # branch as it is, and answers them; its push, if it makes one, is leased on the moved head.
    again = (moved is not None and (job.attempts > 1 or job.last_error is not None)
             and refusal is None and not rt.config.github.dry_run)
    if moved is not None and not again:
        # The branch moved since this dispatch began and no earlier try of this job ran:
        # someone pushed. The agent's push would be refused by its lease anyway, so it does
        # not run; the progress-check sees the move and starts the next round.
        verdict = Verdict(status="addressed", summary="the branch moved before the fixer ran")
    elif refusal is not None:
        # A fork the fixer may not touch: nothing is cloned or run, and the maintainers are asked.
        await _refuse(rt, pr, attempt, rnd.entry_head, refusal, bound)
        return
    elif rt.config.github.dry_run:
        # Decided up to here as for real (a branch that moved, a fork refused); the agent alone
        # does not run.
        await _dry_run(rt, job, pr, rnd, bound)
        return
    else:
        ran = await _run_agent(rt, pr, rnd, attempt, gh_pr, findings, moved if again else None, bound)
        if ran is None:
            return
        verdict = ran
    bound.info("fix.finished", status=verdict.status, finished=verdict.finished, pushed=verdict.pushed_head,
               push_rejected=verdict.push_rejected, detail=verdict.detail)
    if not await _record(rt, pr.pr_key, pk, n, attempt, findings, verdict, gh_pr.get("html_url") or ""):
        bound.info("fix.stale")


async def _open_round(rt: Runtime, pr_key: PrKey, pk: ProcessKey, n: int,
                      attempt: int) -> tuple[PullRequest, Round] | None:
    """The PR's row and the round attempt the job is for, while its fixer is still to run."""
    view = await prs.get(rt.db, pr_key)
    rnd = await rounds.get(rt.db, pr_key, pk, n)
    # The job's own run first: a stopped run's round row can still look open at the new run's
    # round and attempt, and its fix job would run the agent (and push) for a run nobody drives.
    if (view is None or view.pr.process_key != pk or view.pr.status != Status.CONVERGING
            or view.pr.current_round != n or rnd is None or rnd.attempt != attempt
            or rnd.fixer_finished_at is not None or rnd.status is not None):
        return None
    return view.pr, rnd


async def still_owns(db: Database, pr_key: PrKey, pk: ProcessKey, n: int, attempt: int,
                     entry_head: str | None) -> bool:
    """Whether attempt `attempt` of round `n`, begun at `entry_head`, is still the run's work in
    progress: asked by the fixer right before it pushes. A run stopped or superseded, a round
    the row has left, rerun, retried, restarted at a new head, decided or ended while the agent
    worked must not push what it made (docs/guards.md, "fixer push")."""
    now, latest = await prs.get(db, pr_key), await rounds.get(db, pr_key, pk, n)
    return (now is not None and now.pr.process_key == pk and now.derived_status == Status.CONVERGING
            and now.pr.current_round == n and latest is not None and latest.attempt == attempt
            and latest.entry_head == entry_head and latest.fixer_started_at is not None
            and latest.fixer_finished_at is None and latest.status is None)


async def _run_agent(rt: Runtime, pr: PullRequest, rnd: Round, attempt: int, gh_pr: dict,
                     findings: tuple[Finding, ...], moved_to: str | None, bound: Any) -> Verdict | None:
    """The fixer's run on the round, its spending recorded; None when the run's budget is spent
    (the maintainers were asked instead). `moved_to`: the head an earlier try of this job
    pushed, which this run starts from (and leases its push on)."""
    pk, n, key = prs.process_key_of(pr), rnd.round_no, pr.pr_key
    head_repo = (gh_pr.get("head") or {}).get("repo") or {}
    over = await spending.over_budget(rt, pr.pr_key, pk)
    if over is not None:
        await _over_budget(rt, pr, attempt, rnd.entry_head, over, bound)
        return None

    async def still_current() -> bool:
        return await still_owns(rt.db, pr.pr_key, pk, n, attempt, rnd.entry_head)

    entry_head = moved_to or rnd.entry_head
    if entry_head is None:  # a round starts at a head (`rounds.start`), and a move is one
        raise ValueError(f"round {n} of {pr.pr_key} has no entry head to lease the push on")
    request = FixRequest(
        pr_key=pr.pr_key, round_no=n, attempt=attempt, title=gh_pr.get("title") or pr.title,
        description=gh_pr.get("body") or "", head_branch=gh_pr["head"]["ref"], entry_head=entry_head,
        clone_url=head_repo.get("clone_url") or "", token=await rt.github.pr(key).clone_token(),
        findings=findings, instructions=tuple(json.loads(rnd.instructions or "[]")),
        kind=rnd.kind, base_branch=(gh_pr.get("base") or {}).get("ref"),
        base_clone_url=_base_clone_url(gh_pr, head_repo),
        prompt_append=(await repoconfig.effective_config(rt, key.full_repo)).fixer.prompt_append,
        still_current=still_current,
        pushing=lambda sha: _pushing(rt, (key.full_repo, head_repo.get("full_name")), sha),
    )
    if moved_to is not None:
        bound.info("fix.after_move", entry_head=rnd.entry_head, moved_to=moved_to)
    bound.info("fix.started", fixer=rt.config.fixer.kind, findings=len(findings))
    assert rt.fixer is not None, "a fix job runs only where serve built the fixer"
    verdict = await rt.fixer.run(request)
    await spending.record(rt, request, pk, verdict)
    return verdict


# How long a dry run holds the round's deadline check: the fixer never ran, so the check would
# only find the branch unmoved and call the round a husk (and the watchdog would heal a round
# with no check left). Held, the PR stays at "would run the fixer".
DRY_RUN_HOLD = timedelta(days=30)


async def _dry_run(rt: Runtime, job: Job, pr: PullRequest, rnd, bound) -> None:
    """Record that the fixer would run now, and with what, and stop: it would push. Nothing is
    cloned either: a clone is a read, but it costs the disk and minutes a dry run has no use for,
    and the agent's inputs are all in the round already."""
    n, pk = rnd.round_no, prs.process_key_of(pr)
    findings = findings_of(rnd.findings) or ()
    instructions = json.loads(rnd.instructions or "[]")
    summary = (f"run the {rt.config.fixer.kind} fixer on round {n} ({rnd.kind}) at "
               f"{(rnd.entry_head or '')[:7]} with {len(findings)} finding(s) and "
               f"{len(instructions)} instruction(s)")
    async with rt.db.session() as s:
        await prs.fenced_update(None, pr.pr_key, pk, {"last_action": f"dry run: would {summary}"},
                                expect_status=Status.CONVERGING, expect_round=n, session=s)
        # The round keeps its findings and instructions (the agent's prompt inputs) and says why
        # no verdict follows; it stays open, as the fixer's round would while it worked.
        await rounds.update_round(s, pr.pr_key, pk, n, {"summary": f"dry run: the fixer did not run; it would {summary}"},
                                  expect_attempt=rnd.attempt, open_only=True)
        await hold_round_checks(s, pr.pr_key, pk, n)
    if await outbox.record_dry_run(rt.db, job, summary):
        metrics.DRY_RUN_SUPPRESSED.labels("fix").inc()
        bound.info("dry_run.would", kind="fix", summary=summary,
                   findings=[f"{f.path}:{f.line}" for f in findings][:20])


async def hold_round_checks(session, pr_key: PrKey, process_key: ProcessKey, round_no: int) -> None:
    """In the caller's transaction: put the round's waiting progress checks off by
    `DRY_RUN_HOLD`, in a dry run where no fixer (nor a person it asked) was set to work."""
    await session.exec(update(Job).where(
        col(Job.kind) == JobKind.PROGRESS_CHECK, col(Job.pr_key) == pr_key, col(Job.process_key) == process_key,
        col(Job.round_no) == round_no, col(Job.status) == JobStatus.QUEUED,
    ).values(run_at=utcnow() + DRY_RUN_HOLD, last_error="dry run: held, the fixer did not run"))


def _base_clone_url(gh_pr: dict, head_repo: dict) -> str | None:
    """The base repository's clone URL for a PR from a fork (None: the head's repository is the
    base's, and the clone's own `origin` has the base branch)."""
    base_repo = (gh_pr.get("base") or {}).get("repo") or {}
    if not base_repo or base_repo.get("full_name") == head_repo.get("full_name"):
        return None
    return base_repo.get("clone_url") or None


async def _branch_head(rt: Runtime, full_repo: str, branch: str, base_repo: str) -> str | None:
    """None: the branch cannot be read (deleted, or a fork the App cannot see). The fork policy
    then still escalates; the fixer's own clone fails for a branch that is really gone. Read with
    the base repository's installation (a fork's account may have none)."""
    owner, _, repo = full_repo.partition("/")
    try:
        return await rt.github.repository(owner, repo).branch_head(branch, via=base_repo)
    except NotFound:
        return None


async def _over_budget(rt: Runtime, pr: PullRequest, attempt: int, entry_head: str | None,
                       over: spending.Over, bound) -> None:
    """The fixer does not start past an agent budget: the run's own is escalated naming the
    figure; the hour's (all PRs together) is waited out, the round's deadline put off with it."""
    metrics.AGENT_BUDGET_WAITS.labels(over.budget).inc()
    pk, n = prs.process_key_of(pr), pr.current_round
    if over.until is None:
        action = Escalate(spending.AGENT_BUDGET, spending.question(over),
                          fingerprint(spending.AGENT_BUDGET, pk, str(n), str(attempt)))
        await _refuse(rt, pr, attempt, entry_head, action, bound, f"the fixer did not run: {over.why}")
        return
    async with rt.db.session() as s:
        won = await prs.fenced_update(None, pr.pr_key, pk, {
            "last_action": f"fixer waits until {over.until:%H:%M} UTC: {over.why}"},
            expect_status=Status.CONVERGING, expect_round=n, session=s)
        if won:
            await spending.put_off_deadline(s, rt, pr.pr_key, pk, n, over.until)
    bound.info("fix.over_hour_budget", until=over.until.isoformat(), why=over.why)
    if won:
        raise Reschedule(over.until, over.why)


async def _refuse(rt: Runtime, pr: PullRequest, attempt: int, entry_head: str | None, action: Escalate,
                  bound, summary: str = "the fixer did not run: the PR's branch is in a fork") -> None:
    """Escalate instead of running the fixer, and end the round; fenced on the job's own run, round
    and attempt, so a fix job that runs twice (a redelivery, a retry after a lost commit) asks once."""
    pk, n = prs.process_key_of(pr), pr.current_round
    try:
        async with rt.db.session() as s:
            if await escalate(s, rt, pr, action, expect_status=Status.CONVERGING, process_key=pk) is None:
                raise _Superseded()
            if not await rounds.update_round(s, pr.pr_key, pk, n, {
                "status": "blocked", "exit_head": entry_head, "ended_at": utcnow(),
                "summary": summary,
            }, expect_attempt=attempt, open_only=True):
                raise _Superseded()
    except _Superseded:
        bound.info("fix.stale")
        return
    bound.info("fix.refused", kind=action.kind)
    await check_summary.publish(rt, pr.pr_key)


def _pushing(rt: Runtime, repos: tuple[str | None, ...], sha: str) -> None:
    # The PR's `synchronize` names the base repository, the `push` the head's (a fork's).
    for repo in repos:
        if repo:
            rt.own_pushes.add(repo, sha)


async def _record(rt: Runtime, pr_key: PrKey, pk: ProcessKey, n: int, attempt: int, findings, verdict: Verdict,
                  pr_url: str = "") -> bool:
    """The verdict, its thread replies and the progress-check, all or nothing.

    Fenced on the job's own run, round and attempt: a slow fixer whose round was meanwhile
    rerun (its deadline passed) must not hand its verdict to the next attempt.
    """
    try:
        await _write(rt, pr_key, pk, n, attempt, findings, verdict, pr_url)
    except _Superseded:
        return False
    return True


def answered_threads(findings, actions) -> list[tuple[Finding, ThreadAction]]:
    """Each thread the verdict answers, once, with its action (pure).

    A group's thread (bot/rules/findings.py, `group`) is answered with the action stated for
    its own id; a twin with none takes the lead's only when its text is the lead's (the same
    print): a near-duplicate may say something the fixer's answer to the lead does not cover,
    and is left for the next review to raise again."""
    stated = {a.thread_id: a for a in actions}
    out = []
    for finding in findings:
        if not finding.thread_id:
            continue
        lead = stated.get(finding.thread_id)
        for member in threads_of(finding):
            act = stated.get(member.thread_id)
            if act is None and lead is not None and member.fingerprint == finding.fingerprint:
                act = lead
            if act is not None:  # the lead alone: its twins are members of their own here
                out.append((replace(member, twins=(), twin_texts=()), act))
    return out


class _Superseded(Exception):
    """The round moved on (another attempt, another run) while this fixer ran: write nothing."""


async def _write(rt: Runtime, pr_key: PrKey, pk: ProcessKey, n: int, attempt: int, findings, verdict: Verdict,
                 pr_url: str = "") -> None:
    status = verdict.status
    settled: list = []
    async with rt.db.session() as s:
        answers, done = [], {}
        if verdict.finished and not verdict.push_rejected:
            for member, act in answered_threads(findings, verdict.thread_actions):
                if act.action == "fixed":
                    where = f" in {verdict.pushed_head[:7]}" if verdict.pushed_head else ""
                    text, resolve = f"Fixed{where}. {act.reason}".strip(), True
                elif act.action == "declined":
                    text, resolve = f"Declined: {act.reason}", True
                else:
                    text, resolve = f"Needs a maintainer: {act.reason}", False
                answers.append((member, text, resolve))
                done[member.thread_id] = resolve
                if not act.inferred:  # the bot's guess answers this round, never a later repeat
                    settled.append((member, act.action, act.reason))
            await outbox.replies(s, pr_key, pk, answers, key=f"{n}:{attempt}", round_no=n)
        required = [f for f in findings if not f.optional]
        if verdict.finished and not verdict.pushed_head and required and all(
                done.get(f.thread_id) for f in required):
            status = "converged"  # every finding answered without a code change: review again
        if not await prs.fenced_update(None, pr_key, pk, {"last_action": f"fixer: {status}"},
                                       expect_status=Status.CONVERGING, expect_round=n, session=s):
            raise _Superseded()
        if not await rounds.update_round(s, pr_key, pk, n, {
            "fixer_finished_at": utcnow() if verdict.finished else None, "verdict": status,
            "summary": verdict.summary or verdict.detail, "question": verdict.question,
            # What it fixed or declined: a repeat in a later round is answered from this.
            "settled": settled_json(settlements(settled, n, pr_url, verdict.pushed_head)) if settled else None,
        }, expect_attempt=attempt, open_only=True):
            raise _Superseded()
        await queue_progress(s, pr_key, pk, n, attempt, "fixer")
    metrics.fixer_verdict(status, verdict.finished)
