"""The round rules, as pure functions: a snapshot in, a decision out.

Every rule lives here so it can be tested exhaustively without a network or a database; the
shell (step.py, progress.py) only reads, calls these, and applies the actions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Protocol

from bot.rules import reviewers, severity
from bot.rules.findings import (
    apply_adjudications,
    attribution,
    carried_over,
    fingerprint,
    from_review_body,
    from_threads,
    group,
    settled_index,
)
from bot.rules.model import (
    Adjudication,
    CheckProgress,
    Converge,
    Decision,
    Escalate,
    Finding,
    Fix,
    Heal,
    Nudge,
    PrState,
    Review,
    RoundState,
    Settings,
    Snapshot,
    StartRound,
    Wait,
)
from bot.rules.reviewers import Reviewer
from bot.rules.words import code, took
from storage.statuses import TERMINAL, Status


def _minutes(td: timedelta) -> int:
    return int(td.total_seconds() // 60)


# Fixers that are asked in a comment and answer with a push; the others report back in a job.
ASKED_FIXERS = ("mention", "author")



def counts_as_review(r: Review, settings: Settings) -> bool:
    """A configured reviewer's review, or a person's approval / change request.

    A thread reply also shows up as a COMMENTED review by whoever replied: that is not the
    fresh review a round waits for.
    """
    if reviewers.normalise(r.user) == reviewers.normalise(settings.bot_login):
        return False
    if reviewers.normalise(r.user) in {reviewers.normalise(x.login) for x in settings.roster}:
        return True
    return r.state in ("APPROVED", "CHANGES_REQUESTED")


class _DecidedRound(Protocol):  # a stored round or a RoundState
    @property
    def entry_head(self) -> str | None: ...
    @property
    def review_id(self) -> int | None: ...


def reviews_used(rounds: Iterable[_DecidedRound], head: str | None) -> int:
    """The newest review a round begun on `head` was decided on (0: none): it answers no later
    wait on that head, nor a request for one."""
    return max((r.review_id or 0 for r in rounds if r.entry_head == head), default=0)


def answers_forgotten(r: Review, forgot: datetime | None, used: int) -> bool:
    """On a restored backup (`forgot`: when it was taken), whether review `r` of the head may
    answer a request the database forgot it made: submitted since the backup (to the second, as
    GitHub stamps reviews) and newer than a review a round on the head already used (`used`).
    The review request effect then asks nobody and the round's wait takes the review: the two
    must agree, or the round waits for ever."""
    return (forgot is not None and r.id > used and r.submitted_at is not None
            and r.submitted_at >= forgot.replace(microsecond=0))


def fresh_reviews(s: Snapshot) -> tuple[Review, ...]:
    """Every review of the current head submitted after we started waiting, oldest first.

    All three conditions matter: an older review id would replay the previous round, an older
    submission time predates the request, and another commit is not the code in front of us.
    """
    pr = s.pr
    # GitHub stamps reviews to the second: compare at that resolution, or a review submitted in
    # the same second as the request would never count.
    since = pr.waiting_since.replace(microsecond=0) if pr.waiting_since else None
    # A bot that reviews every push by itself is never asked: its review of the head may well
    # predate the round (it reviewed the push before the round began), and none other will come.
    # But not one an earlier round on this same head already decided on: a round that starts
    # again with nothing pushed would replay it, round after round.
    automatic = {reviewers.normalise(x.login) for x in s.settings.roster if x.kind == "automatic"}
    used = reviews_used(s.history, s.head)
    # On a restored backup, a review of the head since the backup may answer a request the
    # database forgot: it counts, though older than the wait or the row's baseline.
    return tuple(sorted((
        r for r in s.reviews
        if ((reviewers.normalise(r.user) in automatic and r.id > used)
            or answers_forgotten(r, s.forgotten_since, used)
            or (r.id > (pr.last_review_id or 0)
                and r.submitted_at is not None
                and (since is None or r.submitted_at >= since)))
        and r.commit_id == s.head
        and r.state not in ("PENDING", "DISMISSED")
        and counts_as_review(r, s.settings)
    ), key=lambda r: r.id))


def missing_reviewers(s: Snapshot) -> tuple[Reviewer, ...]:
    """The required reviewers without a fresh review of the head: what the round waits for.

    A review from one reviewer never stands in for another's: with Copilot and CodeRabbit both
    required, Copilot's review arriving first does not decide the round on its threads alone.
    """
    reviewed = {reviewers.normalise(r.user) for r in fresh_reviews(s)}
    return tuple(r for r in s.settings.roster if r.required and reviewers.normalise(r.login) not in reviewed)


def fresh_review(s: Snapshot) -> Review | None:
    """The review that ends the round's wait: the newest fresh review, once every required
    reviewer has one (with none required, as soon as anyone who counts has reviewed).

    Optional reviewers are never waited for; what they said by then is read with the rest
    (the round reads every unresolved thread, whoever opened it).
    """
    reviews = fresh_reviews(s)
    if not reviews or missing_reviewers(s):
        return None
    return reviews[-1]


def reviewer_timeout(reviewer: Reviewer, settings: Settings) -> timedelta:
    return reviewer.timeout or settings.review_wait_timeout


def _newest(s: Snapshot) -> int | None:
    """The review baseline of a new wait: only reviews after these count."""
    return max((r.id for r in s.reviews), default=s.pr.last_review_id)


def check_findings(s: Snapshot, head: str) -> tuple[Finding, ...]:
    # A failing required check blocks whatever `block_on` says: it is no reviewer's opinion.
    return tuple(
        Finding(thread_id=None, comment_id=None, path=None, line=None,
                body=f"The required check `{name}` failed on {head[:7]}.", author=None,
                fingerprint=fingerprint("check", name), severity="critical")
        for name in s.checks.failing
    )


@dataclass(frozen=True)
class Sorted:
    """A fresh review's findings, sorted: what blocks, what is left to the fixer's choice, the
    instructions remembered answers give, and the replies that settle the rest (remembered
    declines, findings carried over from an earlier round)."""

    blocking: tuple[Finding, ...]
    optional: tuple[Finding, ...]
    instructions: tuple[str, ...]
    replies: tuple[tuple[Finding, str], ...]


def sort_findings(s: Snapshot, review: Review) -> Sorted:
    """Which findings of the fresh review block convergence (docs/architecture.md, "Findings").

    In order: severities from the reviewers' markers (else each reviewer's default); findings
    settled earlier in this run are carried over (answered with a link, not fixed again); the
    maintainers' remembered answers apply; twins from several reviewers become one finding; and
    those below `block_on` go to the fixer as optional, never holding the run back.
    """
    found = from_threads(s.threads or (), lambda login: reviewers.default_severity(s.settings, login))
    # A change request's body is a finding of its own where its author opened no thread (a
    # person asking for changes in a few words beside the bots' threads); one with threads is
    # said by them.
    by = {reviewers.normalise(f.author) for f in found if f.author}
    asked = {f.fingerprint: f for r in fresh_reviews(s) or (review,) if reviewers.normalise(r.user) not in by
             for f in from_review_body(r)}
    found = (*found, *asked.values())
    history = (*s.history, *((s.round,) if s.round else ()))
    found, carried = carried_over(found, settled_index(x for r in history for x in r.settled))
    keep, instructions, declines = apply_adjudications(found, s.adjudications)
    keep = group(keep)
    blocking = tuple(f for f in keep if severity.blocks(f.severity, s.settings.block_on))
    optional = tuple(replace(f, optional=True) for f in keep if f not in blocking)
    return Sorted(blocking, optional, instructions, (*carried, *declines))


def review_wait_deadlines(waiting_since: datetime | None, last_nudge_at: datetime | None, now: datetime,
                          settings: Settings) -> tuple[datetime, datetime]:
    """When a PR waiting for a review of its head escalates as stalled (at the earliest: the
    shortest timeout of a required reviewer), and when it is next nudged, if no review comes
    first: the only things such a PR does unasked."""
    required = [reviewer_timeout(r, settings) for r in settings.roster if r.required]
    timeout_at = (waiting_since or now) + min(required, default=settings.review_wait_timeout)
    nudge_at = now if last_nudge_at is None else last_nudge_at + settings.nudge_window
    return timeout_at, nudge_at


def review_wait_limit(settings: Settings) -> timedelta:
    """How long a wait for a review of the head lasts at most, whatever comes: past every required
    reviewer's timeout (the round's one timeout where none is required) the round escalates as
    stalled, and a clean review's required checks have `checks_timeout` from the same start."""
    required = [reviewer_timeout(r, settings) for r in settings.roster if r.required]
    return max(max(required, default=settings.review_wait_timeout), settings.checks_timeout)


def _stalled(s: Snapshot) -> tuple[Reviewer, ...] | None:
    """The required reviewers whose own timeout passed without a fresh review (None: none did).
    With no reviewer required, the round's one timeout (any review would do) stands alone."""
    since = s.pr.waiting_since or s.now
    missing = missing_reviewers(s)
    if not any(r.required for r in s.settings.roster):
        return () if s.now >= since + s.settings.review_wait_timeout else None
    late = tuple(r for r in missing if s.now >= since + reviewer_timeout(r, s.settings))
    return late or None


def _stalled_question(s: Snapshot, head: str, late: tuple[Reviewer, ...]) -> str:
    if not late:
        return (f"No review of {head[:7]} arrived within {_minutes(s.settings.review_wait_timeout)} "
                "minutes. Request one by hand, or answer to continue.")
    names = ", ".join(f"`{r.login}` (within {took(reviewer_timeout(r, s.settings))})" for r in late)
    return (f"No review of {head[:7]} arrived from {names}. Request one by hand, or answer to continue.")


def _checks_overdue(s: Snapshot, head: str) -> Escalate:
    """A clean review whose required checks have not reported within the timeout, counted from
    the round's wait on this head: asked once (the answer starts the wait again)."""
    names = ", ".join(code(n) for n in s.checks.pending)
    return Escalate("review_checks", f"The review of {head[:7]} is clean, but the required checks {names} have not "
                    f"reported within {took(s.settings.checks_timeout)}. Answer once they run, and the review "
                    "of the head is asked for again.", fingerprint("review_checks", head, *s.checks.pending))


def decide_step(s: Snapshot) -> Decision:
    pr, rnd = s.pr, s.round
    if pr.status in TERMINAL:
        return Decision((Wait("finished"),))
    if pr.status == Status.ESCALATED:
        if s.open_escalations == 0 and pr.escalated_at and s.now - pr.escalated_at >= s.settings.heal_grace:
            return Decision((Heal(),))
        return Decision((Wait("waiting for a maintainer"),))
    if pr.status not in (Status.CONVERGING, Status.WAITING_REVIEW):
        return Decision((Wait(f"{pr.status}: merge stage"),))
    if s.head is None:
        return Decision((Wait("head unreadable: failing open"),))
    if rnd is not None and rnd.fixer_started_at is not None and rnd.status is None:
        if s.settings.fixer_kind in ASKED_FIXERS and s.head != rnd.entry_head:
            return Decision((CheckProgress(rnd.attempt),))
        return Decision((Wait("the fixer is at work"),))
    if pr.status == Status.CONVERGING or rnd is None or rnd.entry_head is None:
        return Decision((StartRound(s.head, f"round {pr.current_round} starts", _newest(s)),))
    if pr.last_round_head != s.head:
        return Decision((StartRound(s.head, "the head moved while waiting for a review", _newest(s)),))

    review = fresh_review(s)
    if review is None:
        late = _stalled(s)
        if late is not None:
            question = _stalled_question(s, s.head, late)
            return Decision((Escalate("review_stalled", question, fingerprint("review_stalled", s.head)),))
        _, nudge_at = review_wait_deadlines(pr.waiting_since, pr.last_nudge_at, s.now, s.settings)
        waiting = ", ".join(r.login for r in missing_reviewers(s))
        reason = f"waiting for a review from {waiting}" if waiting else "waiting for a review"
        if s.now >= nudge_at:
            return Decision((Nudge(), Wait(reason)))
        return Decision((Wait(reason),))

    if s.threads_settling:
        # A thread we answered but whose resolve is still being retried would read as a new
        # finding, and a round spent on it looks like churn.
        return Decision((Wait("replies to the last round are still being posted"),))
    found = sort_findings(s, review)
    keep, instructions, declines = found.blocking, found.instructions, found.replies
    if not keep:
        keep = check_findings(s, s.head)
        if not keep:
            if s.checks.state == "pending":
                if s.now >= (pr.waiting_since or s.now) + s.settings.checks_timeout:
                    return Decision((_checks_overdue(s, s.head),))
                return Decision((Wait("review is clean; waiting for required checks"),))
            if s.open_escalations:
                return Decision((Wait("an escalation is still open"),))
            if any(f.answered is False for f, _ in declines):
                # Answered before converging, not with it: a run that ends on converging (merge
                # off) would drop its own replies still queued. The shell converges only once
                # no reply of the PR is left to post (posted, or given up: a thread left
                # unanswered must not hold the PR forever).
                return Decision((Fix(review.id, (), instructions, declines),
                                 Converge(review.id, s.head, found.optional)))
            return Decision((Converge(review.id, s.head, found.optional),))
    # The round runs the fixer anyway: what does not block is handed over too, as optional.
    return Decision((Fix(review.id, (*keep, *found.optional), instructions, declines),))


# -- progress-check -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Progress:
    """What the progress-check writes: one of advance / rerun / escalate / fail_open."""

    kind: str  # advance | rerun | escalate | fail_open
    round_status: str | None = None
    exit_head: str | None = None
    escalation: Escalate | None = None
    reason: str = ""
    instruction: str | None = None  # a remembered answer handed to the rerun
    remembered: Escalate | None = None  # the question that memory answered


def _churn_file(history: tuple[RoundState, ...], current: RoundState, rounds: int) -> str | None:
    # The merge stage's conflict and CI rounds are not a reviewer asking again.
    recent = [r for r in (*history, current) if r.kind == "review"][-rounds:]
    if len(recent) < rounds or any(r.findings is None for r in recent):
        return None
    if any(r is not current and r.status != "addressed" for r in recent):
        return None
    common = set.intersection(*({f.path for f in r.findings or () if f.path and not f.optional} for r in recent))
    return min(common) if common else None


def decide_progress(
    pr: PrState, rnd: RoundState, head: str | None, history: tuple[RoundState, ...], settings: Settings,
    memory: dict[str, Adjudication] | None = None,
) -> Progress:
    """After the fixer: did the branch move? The verdict is never trusted for progress.

    A question a maintainer already answered for this PR is not asked again: the run goes on the
    way that answer would have taken it (the next round after churn, a rerun with the answer as
    an instruction otherwise), attributed. Every rerun, remembered or not, counts against the
    round's one rerun cap, so no loop of reruns is unbounded.
    """
    memory = memory or {}
    if head is None:
        return Progress("fail_open", reason="head unreadable")
    if head != rnd.entry_head or rnd.verdict == "converged":
        return _moved(pr, rnd, head, history, settings, memory)
    can_rerun = pr.husk_retries < settings.max_husk_retries
    if rnd.fixer_finished_at is None or rnd.verdict == "waiting":
        if can_rerun:
            return Progress("rerun", reason=f"husk {pr.husk_retries + 1}")
        question = (f"The fixer did not finish round {rnd.round_no} in {settings.max_husk_retries + 1} "
                    "attempts and nothing was pushed. Answer to retry with guidance.")
        return Progress("escalate", "blocked", head,
                        Escalate("husk", question, fingerprint("husk", str(rnd.round_no))), "husk")
    if rnd.verdict in ("needs_input", "blocked") and rnd.question:
        esc = Escalate(rnd.verdict, rnd.question, fingerprint("question", rnd.question))
        status = rnd.verdict
    else:
        summary = (rnd.summary or "").strip() or "(no summary)"
        question = (f"The fixer finished round {rnd.round_no} without changing the branch. "
                    f"Its summary:\n\n> {summary}\n\nHow should it proceed?")
        esc, status = Escalate("no_advance", question, fingerprint("no_advance", summary)), "needs_input"
    if esc.fingerprint in memory and can_rerun:
        return Progress("rerun", reason=f"answered from memory: {esc.kind}",
                        instruction=attribution(memory[esc.fingerprint]), remembered=esc)
    return Progress("escalate", status, head, esc, "no-advance" if esc.kind == "no_advance" else status)


def _moved(pr: PrState, rnd: RoundState, head: str, history: tuple[RoundState, ...], settings: Settings,
           memory: dict[str, Adjudication]) -> Progress:
    reason = "head moved" if head != rnd.entry_head else "resolved"
    if rnd.kind != "review":
        # A conflict or CI round of the merge stage: its own budget bounds it (merging.py), and
        # the fresh review of what it pushed is the next round, which the cap still counts.
        return Progress("advance", "addressed", head, reason=f"{rnd.kind} round: {reason}")
    remembered = instruction = None
    churn = _churn_file(history, rnd, settings.churn_rounds)
    if churn is not None:
        question = (f"{settings.churn_rounds} rounds in a row were spent on findings in `{churn}`. "
                    "Is the reviewer asking for something the code should not do?")
        esc = Escalate("churn", question, fingerprint("churn", churn))
        if esc.fingerprint not in memory:
            return Progress("escalate", "addressed", head, esc, "churn")
        # Answered before: go on to the next round, as the answer did then.
        remembered, instruction = esc, attribution(memory[esc.fingerprint])
        reason = "answered from memory: churn"
    if pr.current_round >= pr.max_rounds:
        question = (f"The PR did not converge in {pr.max_rounds} rounds. Answer to allow more "
                    "rounds, or stop it with `/converge stop`.")
        return Progress("escalate", "addressed", head,
                        Escalate("round_cap", question, fingerprint("round_cap", str(pr.max_rounds))),
                        "round cap")
    return Progress("advance", "addressed", head, reason=reason, instruction=instruction, remembered=remembered)
