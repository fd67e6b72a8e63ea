"""Running the outbox: one GitHub write per effect job, safe to repeat and to lose the answer of.

One module per effect kind (review_request, comment, check_run, merge; replies), dispatched
from `HANDLERS`. Every handler first looks for what an earlier attempt may already have done (a lost answer:
GitHub did the write, then answered 502; or a crash before the job was marked done), so the
job layer may retry it freely. Errors propagate: the worker retries with capped backoff, and
a rate limit re-schedules the job for when GitHub says.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import timedelta

import structlog

from bot import metrics
from bot.effects import check_run, comment, merge, restack, review_request
from bot.engine import outbox, repoconfig
from bot.engine.fixing import hold_round_checks
from bot.engine.write_budget import over_budget, pause_runaway
from bot.rules import reviewers
from bot.runtime.context import Runtime
from bot.runtime.workers import Reschedule
from storage import prs
from storage.models import Job, utcnow
from storage.statuses import Status

log = structlog.get_logger(__name__)


Handler = Callable[[Runtime, Job, dict], Awaitable[None]]
UNKNOWN_EFFECT_RETRY = timedelta(minutes=1)


async def run_effect(rt: Runtime, job: Job) -> None:
    payload = json.loads(job.payload)
    effect = payload["effect"]
    handler = HANDLERS.get(effect)
    if handler is None:
        # An effect a newer release queued (a rolling deploy runs two side by side): handed back,
        # no attempt spent, for a replica that knows it. Failing it would lose the write.
        log.warning("effect.unknown", job_id=job.id, effect=effect, retry_in=UNKNOWN_EFFECT_RETRY.total_seconds())
        raise Reschedule(utcnow() + UNKNOWN_EFFECT_RETRY, f"effect {effect!r} is a newer release's: left to one")
    if rt.config.github.dry_run:
        await _dry_run(rt, job, effect, payload)
        return
    if job.process_key is not None and not _exempt(effect, payload):
        pr_key = prs.pr_key_of(job)
        why = await over_budget(rt, pr_key, effect)
        if why is not None:
            await pause_runaway(rt, pr_key, job.process_key, why)
            metrics.EFFECTS.labels(effect, "over_budget").inc()
            log.warning("effect.over_budget", pr_key=job.pr_key, effect=effect, why=why)
            return
    await handler(rt, job, payload)
    metrics.EFFECTS.labels(effect, "done").inc()


async def _dry_run(rt: Runtime, job: Job, effect: str, payload: dict) -> None:
    """Record the effect as decided and not performed: no GitHub request, not even the look an
    effect makes before its write, and no write budget spent (nothing was written). What waits on
    it sees it settled (`outbox.pending`)."""
    pr_key = prs.pr_key_of(job)  # every effect is a PR's (`outbox.add`)
    roster: tuple[reviewers.Reviewer, ...] = ()
    if effect == "request_review":  # the PR's repository's reviewers: its file may name its own
        roster = reviewers.roster(await repoconfig.effective_config(rt, pr_key.full_repo))
    summary = outbox.describe(effect, payload, roster)
    if effect == "check_run":
        summary = await check_run.said_in_dry_run(rt, pr_key) or summary
    elif effect == "comment" and job.process_key and str(payload.get("marker", "")).startswith(FIX_MARKER):
        await _asked_no_one(rt, job, payload["marker"])
    if await outbox.record_dry_run(rt.db, job, summary):
        metrics.DRY_RUN_SUPPRESSED.labels(effect).inc()
        log.info("dry_run.would", kind=effect, pr_key=job.pr_key, process_key=job.process_key,
                 job_id=job.id, summary=summary)


# The marker of an asking fixer's comment (`bot/engine/dispatch.py`): fix:{process}:{round}:{attempt}.
FIX_MARKER = "convergebot:fix:"


async def _asked_no_one(rt: Runtime, job: Job, marker: str) -> None:
    """An asking fixer's comment (mention, author) not posted: nobody was asked, so the round's
    deadline check is held as for a fixer not run, and the PR says what it would have asked."""
    round_no = marker.removeprefix(FIX_MARKER).split(":")[1]
    if not round_no.isdigit():
        return
    pr_key, pk = prs.pr_key_of(job), prs.process_key_of(job)  # an asking fixer's comment is its run's
    async with rt.db.session() as s:
        await hold_round_checks(s, pr_key, pk, int(round_no))
        await prs.fenced_update(None, pr_key, pk,
                                {"last_action": f"dry run: would have asked for a fix ({rt.config.fixer.kind})"},
                                expect_status=Status.CONVERGING, expect_round=int(round_no), session=s)


    # Nothing is queued after: a step that found our replies still in the outbox came back
    # itself (`SETTLING_RETRY_SECONDS` in bot/engine/step.py), and otherwise the next review's
    # webhook takes the next step; a step here would only re-read what the replies changed.


HANDLERS: dict[str, Handler] = {
    "request_review": review_request.request_review,
    "comment": comment.comment,
    "reply": comment.reply,
    "react": comment.react,
    "check_run": check_run.check_run,
    "update_branch": merge.update_branch,
    "merge": merge.merge,
    "restack": restack.restack,
}


def _exempt(effect: str, payload: dict) -> bool:
    # A check run only mirrors the row, and an escalation's comment is bounded by the
    # escalations themselves (each waits for a person); the runaway question must get out.
    return effect == "check_run" or payload.get("escalation_id") is not None

