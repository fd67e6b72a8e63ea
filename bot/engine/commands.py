"""The command job: one maintainer comment, as GitHub sent it, checked, acted on, acknowledged."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta

import structlog
from sqlmodel import select

from bot.engine import outbox, repoconfig, stacks
from bot.engine.dispatch import (
    RUNS_IN_A_JOB,
    fix_key,
    new_attempt,
    queue_fixer,
    queue_progress,
    requeue,
)
from bot.engine.escalation import stored_id
from bot.engine.outbox import first_try
from bot.engine.read import Dependencies, dependencies_of
from bot.engine.submit import Outcome, SubmitOptions, abandon_pr, submit_pr
from bot.github.errors import NotFound
from bot.github.stamps import parse_time
from bot.rules.commands import (
    STAMP_SLACK,
    Command,
    Refusal,
    edited,
    late_answer,
    late_for_run,
    late_retry,
    parse_command,
)
from bot.rules.findings import attribution
from bot.rules.merge import DependencyError, explicit_dependencies
from bot.rules.model import Adjudication
from bot.rules.resume import ROUND_CAP_EXTENSION, resume_plan
from bot.runtime.context import Runtime
from storage import adjudications, commands, escalations, jobs, prs, rounds, runs
from storage.keys import PrKey
from storage.models import Job, utcnow
from storage.statuses import RoundKind, Status

log = structlog.get_logger(__name__)

# Every other verb changes the run, so its author's permission is read fresh: the client's
# cached one may be a minute old, and a writer revoked meanwhile would still be obeyed.
READ_ONLY_VERBS = frozenset({"status"})
LONG_COMMENT = 4000  # characters
# A command's job acts on the comment its delivery carried when it runs this soon after the
# comment was posted; later it reads the comment again (deleted or edited meanwhile?).
CARRIED_FOR = timedelta(minutes=2)


async def handle_command(rt: Runtime, job: Job) -> None:
    p = json.loads(job.payload)
    key = prs.pr_key_of(job)
    review = p.get("kind") == "review"
    comment_id = int(p["comment_id"])
    comment = _carried(job, p)
    if comment is None:
        try:
            comment = await rt.github.pr(key).comment(comment_id, review_comment=review)
        except NotFound:
            return  # deleted before we got to it
        if edited(comment):
            return
    user = comment.get("user") or {}
    author = user.get("login") or ""
    if user.get("type") == "Bot" or author.lower() == rt.config.github.bot_login.lower() or author.endswith("[bot]"):
        return  # never from bots, the bot itself included
    written = parse_time(comment.get("created_at"))
    if written is None:
        return  # GitHub dates every comment: one it did not cannot be placed before or after a run
    body = comment.get("body") or ""
    # A long comment is parsed off the event loop: Markdown parsing of a hostile one (anyone
    # may comment) takes a second or more.
    cmd = parse_command(body) if len(body) < LONG_COMMENT else await asyncio.to_thread(parse_command, body)
    if cmd is None:
        return
    verb = "invalid" if isinstance(cmd, Refusal) else cmd.verb
    if not await commands.claim(rt.db, comment_id, key, author, verb, comment.get("body", "")[:2000]):
        return  # this comment was handled already
    bound = log.bind(pr_key=key, comment_id=comment_id, author=author, verb=verb)
    async with rt.db.session() as s:
        await outbox.react(s, key, comment_id, "eyes", review_comment=review)

    accepted: bool
    message: str | None
    if isinstance(cmd, Refusal):
        accepted, message = False, cmd.why
    elif not await rt.github.pr(key).can_write(author,
                                       fresh=cmd.verb not in READ_ONLY_VERBS):
        accepted, message = False, f"@{author}, only collaborators with write access can give convergebot commands."
    else:
        accepted, message = await execute(rt, key, cmd, author, written)
    # The acknowledgement, the audit row and the next step commit together.
    async with rt.db.session() as s:
        if accepted:
            await outbox.react(s, key, comment_id, "+1", review_comment=review)
            await requeue(s, key, f"cmd:{comment_id}", once=True)
        if message:
            await outbox.comment(s, key, f"convergebot:cmd:{comment_id}", message)
        await commands.settle(s, comment_id, accepted, message or "done")
    bound.info("command.handled", accepted=accepted, why=message)


def _carried(job: Job, p: dict) -> dict | None:
    """The comment as the signed delivery (or the scan's read) carried it, when the job runs on
    its first try within `CARRIED_FOR` of the comment's posting; else None and the job reads it.

    Saves the read of every command (a rate-limited request). A late job (a redelivery hours
    later, a backlog) reads it again: a comment deleted or edited since is no command."""
    comment = p.get("comment")
    if not isinstance(comment, dict) or not first_try(job):
        return None
    posted = parse_time(comment.get("created_at"))
    if posted is None or edited(comment):
        return None
    return comment if abs(utcnow() - posted) <= CARRIED_FOR else None


async def execute(rt: Runtime, key: PrKey, cmd: Command, author: str,
                  written: datetime | None = None) -> tuple[bool, str | None]:
    """Act on `cmd`, written at `written` (a comment's stamp; None: now). A command acts only on
    the run, round and escalation that were current when it was written: a late one changes
    nothing and its reply says why (`bot/rules/commands.py`, "the moment a command was written for")."""
    pr_key = key
    cfg = rt.config.convergence
    if cmd.verb == "start":
        try:
            depends_on = explicit_dependencies(key, cmd.depends_on)
        except DependencyError as e:
            return False, f"Nothing was started: {e}."
        cfg = (await repoconfig.effective_config(rt, key.full_repo)).convergence  # the rounds, if not given
        opts = SubmitOptions(max_rounds=cmd.rounds or cfg.max_rounds, converge_only=cmd.no_merge or not cfg.merge,
                             submitted_by=author, asked_at=written, depends_on=depends_on)
        below = await stacks.enroll_below(rt, key, opts) if cmd.stack else []
        result = await submit_pr(rt.db, key, opts)
        if result.outcome == Outcome.LATE:
            return False, result.why
        stacked = (f"Enrolled the PRs it is stacked on too: {', '.join(below)} (they land first, "
                   f"bottom-up).") if below else None
        if result.outcome == Outcome.STARTED:
            return True, stacked
        unchanged = (" Its dependencies are unchanged: `--depends-on` is recorded when a run starts (a "
                     "`Depends-on:` line in the description adds one to a running PR).") if depends_on else ""
        return True, "convergebot is already working on this PR (`/converge status` shows where)." + unchanged
    view = await prs.get(rt.db, pr_key)
    if cmd.verb == "status":
        if view is None:
            return True, "This PR is not enrolled. `/converge` enrolls it."
        deps = (await dependencies_of(rt.db, [pr_key])).get(pr_key)
        return True, _status_text(view, deps)
    if cmd.verb == "forget":
        # The answers given by the time it was written: one given since is news to its author.
        given_by = written + STAMP_SLACK if written is not None else None
        async with rt.db.session() as s:
            n = await adjudications.invalidate_all(s, pr_key, given_by=given_by)
        return True, f"Forgot {n} remembered answer(s)." if n else None
    if view is None or view.resubmittable:
        return False, "convergebot has no active run on this PR. `/converge` starts one."
    pr = view.pr
    pk = prs.process_key_of(pr)
    if written is not None:
        # The run as read: every action below is fenced on its key, so one started after this
        # read is never acted on either.
        run = await runs.get_run(rt.db, pk)
        if run is not None and (why := late_for_run(cmd.verb, written, run.started_at)):
            return False, why
    if cmd.verb == "stop":
        if not await abandon_pr(rt.db, pr_key, f"stopped by @{author}", run=pk):
            return False, "The run moved on meanwhile; nothing was stopped."
        return True, None
    if cmd.verb == "merge":
        await prs.fenced_update(rt.db, pr_key, pk, {"merge_approved": True,
                                                                "last_action": f"merge approved by @{author}"})
        return True, None
    if cmd.verb == "retry":
        rnd = await rounds.get(rt.db, pr_key, pk, pr.current_round)
        if written is not None and rnd is not None and (why := late_retry(written, rnd.round_no, rnd.started_at)):
            return False, why
        async with rt.db.session() as s:
            won = await prs.fenced_update(None, pr_key, pk, {
                "status": Status.CONVERGING, "husk_retries": 0, "escalated_at": None,
                "last_action": f"round {pr.current_round} retried by @{author}",
            }, expect_status=(Status.CONVERGING, Status.WAITING_REVIEW, Status.ESCALATED),
                # The round read: a progress check that opened the next round meanwhile (its
                # status is one a retry takes) must not have it restarted as the one it ended.
                expect_round=pr.current_round, session=s)
            if won:
                await escalations.mark_open_stale(s, pr_key)
                # The retried round is a new attempt: every job of the old one (a fixer still
                # running, its check, the deadline's check, a redelivery), in this process or
                # another, then fails its attempt fence instead of deciding the restarted round.
                if rnd is not None and rnd.kind != RoundKind.REVIEW and rnd.findings:
                    # A conflict or CI round has no review to wait for: its fixer runs again,
                    # from the branch as it is.
                    attempt = await new_attempt(s, pr_key, pk, pr.current_round, {
                        **rounds.VERDICT_FIELDS, "entry_head": pr.head_sha, "fixer_started_at": utcnow()})
                    await queue_fixer(s, rt, pr.model_copy(update={"last_round_head": pr.head_sha}),
                                      pr.current_round, attempt, rnd.findings, json.loads(rnd.instructions or "[]"),
                                      kind=rnd.kind)
                else:
                    await rounds.next_attempt(s, pr_key, pk, pr.current_round,
                                              {**rounds.VERDICT_FIELDS, "entry_head": None})
        return (True, None) if won else (False, "The run moved on meanwhile; try again.")
    return await answer(rt, pr, cmd, author, written)


async def answer(rt: Runtime, pr, cmd: Command, author: str,
                 written: datetime | None = None) -> tuple[bool, str | None]:
    open_ = await escalations.open_for(rt.db, pr.pr_key)
    target = next((e for e in open_ if e.id == cmd.escalation_id), None) if cmd.escalation_id else (
        open_[-1] if open_ else None)
    if target is None:
        return False, "There is no open escalation to answer on this PR."
    # The escalation as read: the answer below is a compare-and-set on it still being open.
    if written is not None and (why := late_answer(written, stored_id(target), target.asked_at)):
        return False, why
    now, n = utcnow(), pr.current_round
    rnd = await rounds.get(rt.db, pr.pr_key, pr.process_key, n)
    plan = resume_plan(target.kind, mid_fix=rnd is not None and rnd.fixer_started_at is not None
                       and rnd.status is None)
    values: dict = {"status": Status.CONVERGING, "escalated_at": None,
                    "last_action": f"escalation #{target.id} answered by @{author}"}
    if plan == "review":
        values |= {"status": Status.WAITING_REVIEW, "waiting_since": now, "last_nudge_at": now}
    elif plan == "next_round":
        values |= {"status": Status.WAITING_REVIEW, "current_round": n + 1, "husk_retries": 0,
                   "waiting_since": now, "last_nudge_at": now, "last_round_head": pr.head_sha}
        if target.kind == "round_cap":
            # From the round reached: the merge stage's conflict and CI rounds may have taken
            # the count past the cap, and an answer must still buy rounds.
            values["max_rounds"] = max(pr.max_rounds, n) + ROUND_CAP_EXTENSION
    elif plan == "merge_stage":
        # Dependencies first (a cycle the answer broke), then mergeability; the conflict and CI
        # round budgets and the merge tries count from the answer on.
        values |= {"status": Status.WAITING_DEPS, "mergeability_unknown_since": None, "merge_budget_since": now}
    instructions = json.loads(rnd.instructions or "[]") if rnd else []
    instructions.append(attribution(Adjudication(target.fingerprint, cmd.text, author, now)))
    if plan == "rerun":
        values["husk_retries"] = 0  # a person's answer gives the round a fresh rerun budget
    try:
        # One transaction: the escalation answered, the answer remembered, the others stale, the
        # PR resumed and what it resumes with queued, or none of it.
        async with rt.db.session() as s:
            # The PR row first, as every other writer of both takes them (a retry, a reopen):
            # taken the other way round, an answer and a retry could deadlock on PostgreSQL.
            if not await prs.fenced_update(None, pr.pr_key, pr.process_key, values,
                                           expect_status=Status.ESCALATED, expect_round=n, session=s):
                raise _Lost()
            if not await escalations.answer(s, stored_id(target), cmd.text, author):
                raise _Lost("That escalation was answered already.")
            await escalations.mark_open_stale(s, pr.pr_key, except_id=target.id)
            await adjudications.record(s, pr.pr_key, target.fingerprint, cmd.text, author)
            if plan == "next_round":
                await rounds.start(s, pr.pr_key, pr.process_key, n + 1, pr.head_sha or "")
                await outbox.request_review(s, pr.pr_key, pr.process_key, n + 1, f"answer:{target.id}",
                                            pr.head_sha, pr.latest_review_id)
            elif plan == "review":
                await outbox.request_review(s, pr.pr_key, pr.process_key, n, f"answer:{target.id}",
                                            pr.head_sha, pr.latest_review_id)
            elif plan == "merge_stage":
                await requeue(s, pr.pr_key, "answered")
            elif plan == "fixing" and rnd is not None:
                await _check_fixed_round(s, rt, pr, rnd.attempt, target)
            elif rnd is not None:
                attempt = await new_attempt(s, pr.pr_key, pr.process_key, n, {
                    **rounds.VERDICT_FIELDS, "fixer_started_at": now, "instructions": json.dumps(instructions)})
                await queue_fixer(s, rt, pr, n, attempt, rnd.findings or "[]", instructions, kind=rnd.kind)
    except _Lost as lost:
        return False, str(lost) or "The run moved on meanwhile; nothing was changed."
    return True, None


async def _check_fixed_round(s, rt: Runtime, pr, attempt: int, target) -> None:
    """In the answer's transaction: the round resumed at its fixer is checked again once that
    fixer is done. A fix job still queued or running queues its own check as it ends; a finished
    one's check was lost to the pause, so one is queued now. An asking fixer's round needs
    none: the step checks progress once the branch moves, and the deadline check still stands."""
    if rt.config.fixer.kind not in RUNS_IN_A_JOB:
        return
    fix = (await s.exec(select(Job.status).where(
        Job.key == fix_key(pr.process_key, pr.current_round, attempt)))).first()
    if fix in (jobs.JobStatus.QUEUED, jobs.JobStatus.RUNNING):
        return
    await queue_progress(s, pr.pr_key, pr.process_key, pr.current_round, attempt, f"answer:{stored_id(target)}")


class _Lost(Exception):
    """The PR left `escalated` meanwhile: the whole answer transaction rolls back."""


def _status_text(view, deps: Dependencies | None) -> str:
    pr = view.pr
    text = (f"**convergebot status**: {view.derived_status}, round {pr.current_round} of {pr.max_rounds}"
            f"{f', head {pr.head_sha[:7]}' if pr.head_sha else ''}. Last action: {pr.last_action or '-'}.")
    if deps and deps.depends_on:
        named = ", ".join(f"{k} ({'not merged' if k in deps.unmerged else 'merged'})" for k in deps.depends_on)
        text += f" Depends on: {named}."
    return text
