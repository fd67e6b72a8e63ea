"""Running the outbox: one GitHub write per effect job, safe to repeat and to lose the answer of.

Every handler first looks for what an earlier attempt may already have done (a lost answer:
GitHub did the write, then answered 502; or a crash before the job was marked done), so the
job layer may retry it freely. Errors propagate: the worker retries with capped backoff, and
a rate limit re-schedules the job for when GitHub says.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from datetime import timedelta

import structlog

from bot import metrics
from bot.effects import outbox
from bot.effects.replies import Reply, reply_and_resolve
from bot.engine import checkrun, repoconfig
from bot.engine.read import review_of
from bot.engine.write_budget import over_budget, pause_runaway
from bot.github.client import COPILOT_REVIEWER
from bot.github.errors import Conflict, NotFound
from bot.github.stamps import parse_time
from bot.intake import redelivery
from bot.prkey import parse_pr_key
from bot.rules import reviewers
from bot.rules.model import Review
from bot.runtime.context import Runtime
from storage import escalations, jobs, prs, rounds
from storage.models import Job, utcnow
from storage.statuses import Status

log = structlog.get_logger(__name__)

# A review request run this long after its decision looks at the reviews before asking.
REVIEW_LOOK_AFTER = timedelta(seconds=30)

Handler = Callable[[Runtime, Job, dict], Awaitable[None]]


async def run_effect(rt: Runtime, job: Job) -> None:
    payload = json.loads(job.payload)
    effect = payload["effect"]
    handler = HANDLERS.get(effect)
    if handler is None:
        raise ValueError(f"unknown effect {effect!r}")
    if rt.config.github.dry_run:
        await _dry_run(rt, job, effect, payload)
        return
    if job.process_key is not None and not _exempt(effect, payload):
        why = await over_budget(rt, job.pr_key, effect)
        if why is not None:
            await pause_runaway(rt, job.pr_key, job.process_key, why)
            metrics.EFFECTS.labels(effect, "over_budget").inc()
            log.warning("effect.over_budget", pr_key=job.pr_key, effect=effect, why=why)
            return
    await handler(rt, job, payload)
    metrics.EFFECTS.labels(effect, "done").inc()


async def _dry_run(rt: Runtime, job: Job, effect: str, payload: dict) -> None:
    """Record the effect as decided and not performed: no GitHub request, not even the look an
    effect makes before its write, and no write budget spent (nothing was written). What waits on
    it sees it settled (`outbox.pending`)."""
    roster: tuple[reviewers.Reviewer, ...] = ()
    if effect == "request_review":  # the PR's repository's reviewers: its file may name its own
        roster = reviewers.roster(await repoconfig.effective_config(rt, parse_pr_key(job.pr_key).full_repo))
    summary = outbox.describe(effect, payload, roster)
    if effect == "check_run":
        summary = await _check_run_said(rt, job.pr_key) or summary
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
    from bot.engine.fixing import hold_round_checks

    round_no = marker.removeprefix(FIX_MARKER).split(":")[1]
    if not round_no.isdigit():
        return
    async with rt.db.session() as s:
        await hold_round_checks(s, job.pr_key, job.process_key, int(round_no))
        await prs.fenced_update(None, job.pr_key, job.process_key,
                                {"last_action": f"dry run: would have asked for a fix ({rt.config.fixer.kind})"},
                                expect_status=Status.CONVERGING, expect_round=int(round_no), session=s)


async def _check_run_said(rt: Runtime, pr_key: str) -> str | None:
    """Take the check run as said, in this process, as it would have been written: `publish`
    then queues no update until the row changes again (else every step of an unchanged PR
    would queue one, never written). What it would say, for the record; None: nothing to say."""
    view = await prs.get(rt.db, pr_key)
    if view is None or not view.pr.head_sha:
        return None
    fields = await checkrun._fields(rt, view)
    checkrun._said(rt)[pr_key] = (view.pr.head_sha, fields)
    return f"set the convergebot check run on {view.pr.head_sha[:7]} to {fields['output']['title']!r}"


async def _request_review(rt: Runtime, job: Job, p: dict) -> None:
    """Ask the configured reviewers, each its way (`bot/rules/reviewers.py`), except those who
    already reviewed this head since the decision: a request whose answer was lost may already
    have been answered by a fast reviewer, and asking again would buy a second review of the
    same head. `automatic` reviewers are never asked.

    A first try within 30 s of the time up to which the decision knew every review of the head
    (`reviews_known_at`: it read them then, or the head was pushed then) asks at once: the
    look was a rate-limited read in every round after our replies, which change the list
    themselves. Run later (behind a long queue, a rate limit or a backoff), a first try still
    asks at once while a review since would be known here (`_would_have_heard`); otherwise, and
    on a retry or for a decision that cannot say, it looks first.
    """
    key = parse_pr_key(job.pr_key)
    since = job.created_at.replace(microsecond=0)  # GitHub stamps reviews to the second

    def answers(r: Review) -> bool:
        if r.commit_id != p["head"]:
            return False
        if p.get("baseline") is not None:
            return r.id > p["baseline"]
        return r.submitted_at is not None and r.submitted_at >= since

    # A first try asks without reading who is requested: that read was a rate-limited one per
    # run (the first), and only a try that may have asked before has anything to find there. A
    # nudge still looks: it comes while a request may be pending.
    look = not first_try(job) or bool(p.get("nudge"))
    # Who is still requested is read before the reviews, not after: a reviewer that answers an
    # earlier try's request (its answer lost) in between then shows in the reviews. Read in the
    # other order, a review submitted between the two reads was in neither (its request gone
    # from the first, itself not yet in the second), and the retry asked for a second review.
    pending = await rt.github.requested_reviewers(key.owner, key.repo, key.number) if look else None
    reviewed: set[str] = set()
    known_at = parse_time(p.get("reviews_known_at"))
    if not first_try(job) or known_at is None or (utcnow() - known_at > REVIEW_LOOK_AFTER
                                                  and not await _would_have_heard(rt, job, p)):
        raw = await rt.github.reviews(key.owner, key.repo, key.number)
        reviewed = {reviewers.normalise(r.user) for r in (review_of(x) for x in raw if isinstance(x.get("id"), int))
                    if answers(r)}
    roster = reviewers.roster(await repoconfig.effective_config(rt, key.full_repo))
    wanted = [r for r in roster if reviewers.normalise(r.login) not in reviewed and r.kind != "automatic"]
    # Copilot through its endpoint, people and teams through requested_reviewers: one call.
    requested = [COPILOT_REVIEWER if r.kind == "copilot" else r.login for r in wanted
                 if r.kind in ("copilot", "request")]
    # A comment-triggered bot is asked once a round: a nudge finds its trigger posted already.
    # Asked first: a request GitHub refuses (a 422 for a login it cannot ask) would otherwise
    # keep every trigger from being posted; posted again on a retry, a trigger finds itself.
    triggered = []
    for r in wanted if not p.get("nudge") else ():
        if r.kind == "comment":
            await rt.github.comment_once(key.owner, key.repo, key.number,
                                         trigger_marker(job, p, r.login), r.trigger)
            triggered.append(r.login)
    asked = (await rt.github.request_review(key.owner, key.repo, key.number, requested, look=look, pending=pending)
             if requested else [])
    asked = [*asked, *triggered]
    log.info("review.requested", pr_key=job.pr_key, asked=asked, already_reviewed=sorted(reviewed))


async def _would_have_heard(rt: Runtime, job: Job, p: dict) -> bool:
    """Whether a review of the PR since the decision would be known here by now: the redelivery
    recovers its repository's lost webhooks (`redelivery.covers`), no sync of the PR that a webhook
    woke is waiting or under way, and no read since saw a review past the decision's newest.

    A review's webhook wakes a sync, and the sync records the newest review id on the row; so
    with none of these, no review came, but for one whose webhook is in flight right now, as a
    review submitted just after a look would not show in it either. At a busy hour the request
    runs tens of seconds after its decision, and the look was one rate-limited read a round."""
    if not redelivery.covers(rt, parse_pr_key(job.pr_key).full_repo):
        return False
    view = await prs.get(rt.db, job.pr_key)
    if view is None or (view.pr.latest_review_id or 0) > (p.get("baseline") or 0):
        return False
    return not await jobs.in_hand(rt.db, job.pr_key, kinds=("sync",))


def trigger_marker(job: Job, p: dict, login: str) -> str:
    """The hidden marker of a trigger comment: one per reviewer, run, round, head and request,
    so a retry whose answer was lost finds the comment posted and does not post it again, while
    a new request of the same round and head (a maintainer's answer to a stalled review) asks
    the bot again."""
    ask = hashlib.sha256(job.key.encode()).hexdigest()[:12]
    return (f"convergebot:trigger run={job.process_key} round={p.get('round')} head={p['head']} "
            f"login={login} ask={ask}")


async def _comment(rt: Runtime, job: Job, p: dict) -> None:
    key = parse_pr_key(job.pr_key)
    posted = await rt.github.comment_once(key.owner, key.repo, key.number, p["marker"], p["body"])
    if p.get("escalation_id") is not None:
        await escalations.set_comment(rt.db, p["escalation_id"], posted["id"])


async def _reply(rt: Runtime, job: Job, p: dict) -> None:
    # A round's replies are one effect; an effect queued by an older version names one thread.
    items = p["replies"] if "replies" in p else [p]
    replies = [Reply(i["thread_id"], i["text"], i["resolve"]) for i in items]
    await reply_and_resolve(rt, job.pr_key, replies, await _answered(rt, job, p, items))
    # Nothing is queued after: a step that found our replies still in the outbox came back
    # itself (`SETTLING_RETRY_SECONDS` in bot/engine/step.py), and otherwise the next review's
    # webhook takes the next step; a step here would only re-read what the replies changed.


def first_try(job: Job) -> bool:
    """Whether no earlier try of this job can have written anything: its first claim, never
    failed, cancelled or put off (a reschedule gives the attempt back but records why)."""
    return job.attempts <= 1 and job.last_error is None


async def _answered(rt: Runtime, job: Job, p: dict, items: list[dict]) -> dict[str, bool] | None:
    """What the round's read showed of our replies on these threads, when it still holds.

    It holds on the first try of an effect when no other reply effect of the PR was queued
    since the round began. The round's fresh review was read only once no reply effect of the
    PR was left to run (`threads_settling` in the step), so every earlier reply of ours is in
    what it read; a later one (an earlier fixer attempt of this round, the round's declines)
    may not be, and neither may a write of this effect's own lost try. Then, or when a thread's
    comments were not all read, the effect reads the threads itself (None).
    """
    if not first_try(job) or p.get("round") is None or job.process_key is None:
        return None
    answered = {i["thread_id"]: i.get("answered") for i in items}
    if any(v is None for v in answered.values()):
        return None
    rnd = await rounds.get(rt.db, job.pr_key, job.process_key, p["round"])
    if rnd is None or await outbox.queued_since(rt.db, job.pr_key, "reply", rnd.started_at, besides=job.id):
        return None
    return answered


async def _react(rt: Runtime, job: Job, p: dict) -> None:
    # GitHub answers 200 to a reaction the user already made: a repeat creates nothing.
    key = parse_pr_key(job.pr_key)
    try:
        await rt.github.react(key.owner, key.repo, p["comment_id"], p["content"], review_comment=p["review_comment"])
    except NotFound:
        log.info("reaction.comment_gone", pr_key=job.pr_key, comment_id=p["comment_id"])  # deleted meanwhile


async def _check_run(rt: Runtime, job: Job, p: dict) -> None:
    await checkrun.sync(rt, job.pr_key, job)


async def _update_branch(rt: Runtime, job: Job, p: dict) -> None:
    key = parse_pr_key(job.pr_key)
    try:
        # `expected_head_sha` makes a repeat harmless: once the base is merged in, the head
        # moved and GitHub refuses (422) instead of merging again.
        await rt.github.update_branch(key.owner, key.repo, key.number, p["expected_head"])
    except Conflict as e:
        log.info("merge.update_branch_refused", pr_key=job.pr_key, error=str(e))


async def _merge(rt: Runtime, job: Job, p: dict) -> None:
    from bot.engine.merge_queue import queue_known, run_enqueue
    from bot.engine.merge_stage import run_merge

    # A base that takes changes only through a merge queue gets the PR queued instead. Whether
    # it does is learnt from GitHub's refusal of the merge (405), then kept for the repository,
    # so a repository without a queue pays no read of it.
    first = first_try(job)
    if queue_known(rt, job.pr_key) and await run_enqueue(rt, job.pr_key, job.process_key, p["sha"], first_try=first):
        return
    if await run_merge(rt, job.pr_key, job.process_key, p["sha"]) == "merge_queue":
        await run_enqueue(rt, job.pr_key, job.process_key, p["sha"], first_try=first)


HANDLERS: dict[str, Handler] = {
    "request_review": _request_review,
    "comment": _comment,
    "reply": _reply,
    "react": _react,
    "check_run": _check_run,
    "update_branch": _update_branch,
    "merge": _merge,
}


def _exempt(effect: str, payload: dict) -> bool:
    # A check run only mirrors the row, and an escalation's comment is bounded by the
    # escalations themselves (each waits for a person); the runaway question must get out.
    return effect == "check_run" or payload.get("escalation_id") is not None

