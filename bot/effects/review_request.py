"""The review request effect: ask each configured reviewer its way, except those who already
reviewed this head since the decision (a lost answer's request may already be answered)."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import structlog

from bot.engine import outbox, repoconfig
from bot.engine.outbox import first_try
from bot.engine.read import review_of
from bot.github.endpoints.reviews import COPILOT_REVIEWER
from bot.github.stamps import parse_time
from bot.intake import redelivery
from bot.rules import reviewers
from bot.rules.decide import answers_forgotten, reviews_used
from bot.rules.model import Review
from bot.runtime.context import Runtime
from storage import jobs, prs, rounds
from storage.models import Job, utcnow
from storage.statuses import JobKind

log = structlog.get_logger(__name__)


# A review request run this long after its decision looks at the reviews before asking.
REVIEW_LOOK_AFTER = timedelta(seconds=30)


async def request_review(rt: Runtime, job: Job, p: dict) -> None:
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
    key = prs.pr_key_of(job)
    since = job.created_at.replace(microsecond=0)  # GitHub stamps reviews to the second
    restore = outbox.MEMORY.restore
    forgot = restore.taken_at if restore is not None else None
    # As the round's wait counts them (`decide.fresh_reviews`): a review a round of the run on
    # this head already decided on answers no request.
    used = reviews_used(await rounds.history(rt.db, key, job.process_key), p["head"]) \
        if forgot is not None and job.process_key else 0

    def answers(r: Review) -> bool:
        if r.commit_id != p["head"]:
            return False
        if answers_forgotten(r, forgot, used):
            return True  # on a restored backup: it answers a request the database forgot it made
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
    pending = await rt.github.pr(key).requested_reviewers() if look else None
    reviewed: set[str] = set()
    known_at = parse_time(p.get("reviews_known_at"))
    if not first_try(job) or known_at is None or (utcnow() - known_at > REVIEW_LOOK_AFTER
                                                  and not await _would_have_heard(rt, job, p)):
        raw = await rt.github.pr(key).reviews()
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
            await rt.github.pr(key).comment_once(trigger_marker(job, p, r.login), r.trigger)
            triggered.append(r.login)
    asked = (await rt.github.pr(key).request_review(requested, look=look, pending=pending)
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
    pr_key = prs.pr_key_of(job)
    if not redelivery.covers(rt, pr_key.full_repo):
        return False
    view = await prs.get(rt.db, pr_key)
    if view is None or (view.pr.latest_review_id or 0) > (p.get("baseline") or 0):
        return False
    return not await jobs.in_hand(rt.db, pr_key, kinds=(JobKind.SYNC,))


def trigger_marker(job: Job, p: dict, login: str) -> str:
    """The hidden marker of a trigger comment: one per reviewer, run, round, head and request,
    so a retry whose answer was lost finds the comment posted and does not post it again, while
    a new request of the same round and head (a maintainer's answer to a stalled review) asks
    the bot again."""
    ask = hashlib.sha256(job.key.encode()).hexdigest()[:12]
    return (f"convergebot:trigger run={job.process_key} round={p.get('round')} head={p['head']} "
            f"login={login} ask={ask}")
