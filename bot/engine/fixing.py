"""The fix job: run the fixer for one round attempt, record its verdict, then check progress."""

from __future__ import annotations

import json

import structlog

from bot.fixers.base import FixRequest
from bot.prkey import parse_pr_key
from bot.runtime import Runtime
from storage import jobs, prs, rounds
from storage.models import Job, utcnow
from storage.statuses import Status

from .dispatch import progress_key
from .read import findings_of
from .threads import reply_and_resolve

log = structlog.get_logger(__name__)


async def fix(rt: Runtime, job: Job) -> None:
    attempt = json.loads(job.payload).get("attempt", 0)
    bound = log.bind(pr_key=job.pr_key, process_key=job.process_key, round=job.round_no, attempt=attempt)
    view = await prs.get(rt.db, job.pr_key)
    rnd = await rounds.get(rt.db, job.pr_key, job.process_key, job.round_no)
    if (view is None or view.pr.process_key != job.process_key or view.pr.status != Status.CONVERGING
            or rnd is None or rnd.attempt != attempt or rnd.fixer_finished_at is not None):
        bound.info("fix.not_applicable")
        return
    pr = view.pr
    key = parse_pr_key(pr.pr_key)
    gh_pr = await rt.github.pull(key.owner, key.repo, key.number)
    head_repo = (gh_pr.get("head") or {}).get("repo") or {}
    findings = findings_of(rnd.findings) or ()
    request = FixRequest(
        pr_key=pr.pr_key, round_no=rnd.round_no, attempt=attempt, title=gh_pr.get("title") or pr.title,
        description=gh_pr.get("body") or "", head_branch=gh_pr["head"]["ref"], entry_head=rnd.entry_head,
        clone_url=head_repo.get("clone_url") or "", token=await rt.github.clone_token(),
        findings=findings, instructions=tuple(json.loads(rnd.instructions or "[]")),
    )
    bound.info("fix.started", fixer=rt.config.fixer.kind, findings=len(findings))
    verdict = await rt.extras["fixer"].run(request)
    bound.info("fix.finished", status=verdict.status, finished=verdict.finished, pushed=verdict.pushed_head,
               push_rejected=verdict.push_rejected, detail=verdict.detail)

    by_thread = {f.thread_id: f for f in findings if f.thread_id}
    resolved = 0
    if verdict.finished and not verdict.push_rejected:
        for act in verdict.thread_actions:
            finding = by_thread.get(act.thread_id)
            if finding is None:
                continue
            if act.action == "fixed":
                where = f" in {verdict.pushed_head[:7]}" if verdict.pushed_head else ""
                await reply_and_resolve(rt, pr.pr_key, finding, f"Fixed{where}. {act.reason}".strip(), resolve=True)
                resolved += 1
            elif act.action == "declined":
                await reply_and_resolve(rt, pr.pr_key, finding, f"Declined: {act.reason}", resolve=True)
                resolved += 1
            else:
                await reply_and_resolve(rt, pr.pr_key, finding, f"Needs a maintainer: {act.reason}", resolve=False)
    status = verdict.status
    if verdict.finished and not verdict.pushed_head and findings and resolved == len(findings):
        status = "converged"  # every finding answered without a code change: review again

    try:
        async with rt.db.session() as s:
            won = await prs.fenced_update(None, pr.pr_key, pr.process_key, {"last_action": f"fixer: {status}"},
                                          expect_status=Status.CONVERGING, expect_round=rnd.round_no, session=s)
            # Only into this attempt's row: a slow fixer whose round was meanwhile rerun (its
            # deadline passed) must not hand its verdict to the next attempt.
            if won and not await rounds.update_round(s, pr.pr_key, pr.process_key, rnd.round_no, {
                "fixer_finished_at": utcnow() if verdict.finished else None, "verdict": status,
                "summary": verdict.summary or verdict.detail, "question": verdict.question,
            }, expect_attempt=attempt):
                raise _Superseded()
    except _Superseded:
        won = False
    if not won:
        bound.info("fix.stale")
        return
    await jobs.enqueue(rt.db, "progress_check", progress_key(pr.process_key, rnd.round_no, attempt, "fixer"),
                       pr_key=pr.pr_key, process_key=pr.process_key, round_no=rnd.round_no,
                       payload={"attempt": attempt})
    rt.wake_workers()


class _Superseded(Exception):
    """The round moved to a later attempt while this fixer ran: write nothing."""
