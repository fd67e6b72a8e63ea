"""The round rules, exhaustively, without a network or a database."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from bot.rules.decide import decide_progress, decide_step, fresh_review
from bot.rules.findings import fingerprint
from bot.rules.model import (
    Adjudication,
    Checks,
    Converge,
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
    Thread,
    Wait,
)

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
H1, H2 = "1" * 40, "2" * 40
SETTINGS = Settings(reviewers=("copilot",), review_wait_timeout=timedelta(minutes=30),
                    nudge_window=timedelta(minutes=10), heal_grace=timedelta(minutes=5),
                    fixer_kind="fake", bot_login="convergebot[bot]")
PR = PrState(pr_key="o/r#1", status="waiting_review", current_round=1, max_rounds=5, waiting_since=T0,
             last_review_id=100, last_nudge_at=T0, last_round_head=H1, husk_retries=0, escalated_at=None)
ROUND = RoundState(round_no=1, entry_head=H1, review_id=None, findings=None, fixer_started_at=None,
                   fixer_finished_at=None, verdict=None, summary=None, question=None, status=None)


def review(id=101, at=T0 + timedelta(minutes=1), commit=H1, user="copilot", state="COMMENTED", body=""):
    return Review(id=id, user=user, state=state, commit_id=commit, submitted_at=at, body=body)


def thread(id="T1", path="a.py", body="use a constant", resolved=False, outdated=False):
    return Thread(id=id, is_resolved=resolved, is_outdated=outdated, path=path, line=3, comment_id=9,
                  body=body, author="copilot")


def snap(**kw) -> Snapshot:
    base = dict(pr=PR, round=ROUND, head=H1, reviews=(), threads=(), checks=Checks("success"),
                open_escalations=0, adjudications={}, now=T0 + timedelta(minutes=2), settings=SETTINGS)
    return Snapshot(**(base | kw))


def kinds(decision):
    return [type(a) for a in decision.actions]


class TestFreshReview:
    def test_a_review_of_the_head_after_waiting_started_is_fresh(self):
        assert fresh_review(snap(reviews=(review(),))).id == 101

    @pytest.mark.parametrize("stale", [
        review(id=100), review(id=99),                       # not newer than the consumed one
        review(at=T0 - timedelta(seconds=1)),                 # submitted before we asked
        review(commit=H2),                                    # another commit
        review(user="convergebot[bot]"),                      # ourselves
        review(state="PENDING"),
    ])
    def test_stale_reviews_are_not_fresh(self, stale):
        assert fresh_review(snap(reviews=(stale,))) is None

    def test_same_second_as_the_request_counts(self):
        waiting = replace(PR, waiting_since=T0 + timedelta(milliseconds=400))
        assert fresh_review(snap(pr=waiting, reviews=(review(at=T0),))).id == 101

    def test_the_newest_fresh_review_wins(self):
        assert fresh_review(snap(reviews=(review(id=101), review(id=105), review(id=103)))).id == 105

    def test_on_a_restored_backup_a_review_since_the_backup_answers_the_wait_it_began_before(self):
        # The backup was taken at T0 - 5 min; the review came after it, before this wait began,
        # and the row's baseline already counts it (a sync after the restore read it): the
        # request it answered is one the database forgot, and the request effect asked nobody.
        taken = T0 - timedelta(minutes=5)
        answer = review(id=100, at=T0 - timedelta(minutes=2))
        assert fresh_review(snap(reviews=(answer,))) is None, "without the restore it is stale"
        assert fresh_review(snap(reviews=(answer,), forgotten_since=taken)).id == 100
        assert fresh_review(snap(reviews=(answer,), forgotten_since=taken + timedelta(microseconds=900))).id == 100, \
            "to the second, as GitHub stamps reviews"

    @pytest.mark.parametrize("stale", [
        review(id=100, at=T0 - timedelta(minutes=6)),         # before the backup
        review(id=100, at=T0 - timedelta(minutes=2), commit=H2),  # another commit
        review(id=90, at=T0 - timedelta(minutes=2)),          # an earlier round on this head used it
    ])
    def test_on_a_restored_backup_older_reviews_still_do_not_answer(self, stale):
        used = replace(ROUND, round_no=0, entry_head=H1, review_id=90)
        assert fresh_review(snap(reviews=(stale,), forgotten_since=T0 - timedelta(minutes=5),
                                 history=(used,))) is None


class TestStep:
    def test_converging_without_a_fixer_starts_the_round_at_the_current_head(self):
        d = decide_step(snap(pr=replace(PR, status="converging"), head=H2))
        assert d.actions == (StartRound(H2, "round 1 starts", 100),)
        seen = decide_step(snap(pr=replace(PR, status="converging"), reviews=(review(id=120, commit=H2),)))
        assert seen.actions[0].review_baseline == 120  # only reviews after the request count

    def test_head_moved_while_waiting_restarts_the_round(self):
        (a,) = decide_step(snap(head=H2)).actions
        assert isinstance(a, StartRound) and a.entry_head == H2

    def test_unreadable_head_fails_open(self):
        assert kinds(decide_step(snap(head=None))) == [Wait]

    def test_fixer_at_work_is_left_alone(self):
        rnd = replace(ROUND, fixer_started_at=T0)
        assert kinds(decide_step(snap(pr=replace(PR, status="converging"), round=rnd))) == [Wait]

    def test_zero_findings_green_checks_nothing_open_converges(self):
        d = decide_step(snap(reviews=(review(),), threads=(thread(resolved=True), thread(outdated=True))))
        assert d.actions == (Converge(101, H1),)

    def test_pending_checks_wait_and_failing_checks_go_to_the_fixer(self):
        assert kinds(decide_step(snap(reviews=(review(),), checks=Checks("pending", pending=("ci",))))) == [Wait]
        (fix,) = decide_step(snap(reviews=(review(),), checks=Checks("failure", failing=("ci",)))).actions
        assert isinstance(fix, Fix) and "`ci` failed" in fix.findings[0].body

    def test_an_open_escalation_blocks_convergence(self):
        assert kinds(decide_step(snap(reviews=(review(),), open_escalations=1))) == [Wait]

    def test_findings_go_to_the_fixer(self):
        (fix,) = decide_step(snap(reviews=(review(),), threads=(thread(), thread("T2", resolved=True)))).actions
        assert isinstance(fix, Fix) and fix.review_id == 101
        assert [f.thread_id for f in fix.findings] == ["T1"]

    def test_a_changes_requested_body_without_threads_is_a_finding(self):
        (fix,) = decide_step(snap(reviews=(review(state="CHANGES_REQUESTED", body="rename it"),))).actions
        assert fix.findings[0].body == "rename it"
        assert decide_step(snap(reviews=(review(body="Copilot reviewed 2 files"),))).actions == (Converge(101, H1),)

    def test_a_fresh_review_waits_while_our_replies_are_still_being_posted(self):
        d = decide_step(snap(reviews=(review(),), threads=(thread(),), replies_due=T0))
        assert kinds(d) == [Wait]

    def test_remembered_answers_decline_or_instruct(self):
        t1, t2 = thread("T1", body="rename"), thread("T2", path="b.py", body="add docs")
        fp1 = fingerprint("thread", "a.py", "rename")
        fp2 = fingerprint("thread", "b.py", "add docs")
        memory = {fp1: Adjudication(fp1, "decline: the name is public API", "maint", T0),
                  fp2: Adjudication(fp2, "yes, in the README", "maint", T0)}
        (fix,) = decide_step(snap(reviews=(review(),), threads=(t1, t2), adjudications=memory)).actions
        assert [f.thread_id for f in fix.findings] == ["T2"]
        assert "@maint" in fix.instructions[0] and "README" in fix.instructions[0]
        assert [f.thread_id for f, _ in fix.declines] == ["T1"] and "@maint" in fix.declines[0][1]

    def test_all_findings_declined_from_memory_converges(self):
        fp = fingerprint("thread", "a.py", "rename")
        memory = {fp: Adjudication(fp, "decline", "maint", T0)}
        d = decide_step(snap(reviews=(review(),), threads=(thread(body="rename"),), adjudications=memory))
        # Answered first; the shell converges once the answer is no longer queued (a run that
        # ends on converging would drop its own replies still queued).
        assert kinds(d) == [Fix, Converge] and d.actions[0].findings == ()
        answered = replace(thread(body="rename"), replied=True)
        d = decide_step(snap(reviews=(review(),), threads=(answered,), adjudications=memory))
        assert kinds(d) == [Converge]

    def test_nudge_at_most_once_per_window(self):
        assert kinds(decide_step(snap(now=T0 + timedelta(minutes=9)))) == [Wait]
        assert kinds(decide_step(snap(now=T0 + timedelta(minutes=10)))) == [Nudge, Wait]
        nudged = replace(PR, last_nudge_at=T0 + timedelta(minutes=10))
        assert kinds(decide_step(snap(pr=nudged, now=T0 + timedelta(minutes=19)))) == [Wait]

    def test_review_never_arrives_escalates_at_the_timeout(self):
        (a,) = decide_step(snap(now=T0 + timedelta(minutes=30))).actions
        assert isinstance(a, Escalate) and a.kind == "review_stalled"

    def test_escalated_waits_then_heals_only_when_nothing_is_open(self):
        esc = replace(PR, status="escalated", escalated_at=T0)
        assert kinds(decide_step(snap(pr=esc, open_escalations=1, now=T0 + timedelta(hours=1)))) == [Wait]
        assert kinds(decide_step(snap(pr=esc, now=T0 + timedelta(minutes=4)))) == [Wait]
        assert kinds(decide_step(snap(pr=esc, now=T0 + timedelta(minutes=5)))) == [Heal]

    @pytest.mark.parametrize("status", ["converged", "merged", "abandoned", "waiting_deps", "merging"])
    def test_other_statuses_wait(self, status):
        assert kinds(decide_step(snap(pr=replace(PR, status=status)))) == [Wait]


FIXING = replace(PR, status="converging")
F_A = Finding(thread_id="T", comment_id=1, path="a.py", line=1, body="x", author="c", fingerprint="f")


def done(**kw):
    return replace(ROUND, **({"fixer_started_at": T0, "fixer_finished_at": T0, "verdict": "addressed",
                              "summary": "did it", "findings": (F_A,)} | kw))


class TestProgress:
    def test_head_moved_advances(self):
        p = decide_progress(FIXING, done(), H2, (), SETTINGS)
        assert (p.kind, p.exit_head, p.round_status) == ("advance", H2, "addressed")

    def test_unreadable_head_fails_open(self):
        assert decide_progress(FIXING, done(), None, (), SETTINGS).kind == "fail_open"

    def test_husk_reruns_twice_then_escalates(self):
        husk = done(fixer_finished_at=None)
        assert decide_progress(FIXING, husk, H1, (), SETTINGS).kind == "rerun"
        assert decide_progress(replace(FIXING, husk_retries=1), husk, H1, (), SETTINGS).kind == "rerun"
        p = decide_progress(replace(FIXING, husk_retries=2), husk, H1, (), SETTINGS)
        assert p.kind == "escalate" and p.escalation.kind == "husk"

    def test_no_advance_escalates_at_once_with_the_summary(self):
        p = decide_progress(FIXING, done(summary="nothing to change"), H1, (), SETTINGS)
        assert p.escalation.kind == "no_advance" and "nothing to change" in p.escalation.question

    def test_a_question_from_the_fixer_is_escalated(self):
        p = decide_progress(FIXING, done(verdict="needs_input", question="Rename the API?"), H1, (), SETTINGS)
        assert (p.escalation.kind, p.escalation.question) == ("needs_input", "Rename the API?")

    def test_round_cap(self):
        p = decide_progress(replace(FIXING, current_round=5), done(round_no=5), H2, (), SETTINGS)
        assert p.escalation.kind == "round_cap" and "5 rounds" in p.escalation.question

    def test_churn_four_addressed_rounds_in_one_file(self):
        past = tuple(done(round_no=n, status="addressed") for n in (1, 2, 3))
        p = decide_progress(replace(FIXING, current_round=4), done(round_no=4), H2, past, SETTINGS)
        assert p.escalation.kind == "churn" and "a.py" in p.escalation.question
        other = replace(F_A, path="b.py")
        mixed = (*past[:2], done(round_no=3, status="addressed", findings=(other,)))
        assert decide_progress(replace(FIXING, current_round=4), done(round_no=4), H2, mixed, SETTINGS).kind == "advance"

    def test_a_remembered_answer_reruns_instead_of_asking_again(self):
        q = done(verdict="needs_input", question="Rename the API?")
        fp = fingerprint("question", "Rename the API?")
        memory = {fp: Adjudication(fp, "keep the name", "maint", T0)}
        p = decide_progress(FIXING, q, H1, (), SETTINGS, memory)
        assert p.kind == "rerun" and "@maint" in p.instruction and "keep the name" in p.instruction
        assert p.remembered.kind == "needs_input"

    def test_remembered_answers_rerun_only_within_the_round_s_one_rerun_cap(self):
        q = done(verdict="needs_input", question="Rename the API?")
        fp = fingerprint("question", "Rename the API?")
        memory = {fp: Adjudication(fp, "keep the name", "maint", T0)}
        # Reruns of any kind spend the same cap: once it is spent, the question is asked again
        # (a person answers it), never rerun from memory for ever.
        p = decide_progress(replace(FIXING, husk_retries=2), q, H1, (), SETTINGS, memory)
        assert p.kind == "escalate" and p.escalation.fingerprint == fp

    def test_a_remembered_churn_answer_moves_on_to_the_next_round(self):
        past = tuple(done(round_no=n, status="addressed") for n in (1, 2, 3))
        fp = fingerprint("churn", "a.py")
        memory = {fp: Adjudication(fp, "decline: the reviewer is wrong", "maint", T0)}
        p = decide_progress(replace(FIXING, current_round=4), done(round_no=4), H2, past, SETTINGS, memory)
        # Not a rerun: the head moved, so a rerun's push would be refused by its lease.
        assert (p.kind, p.exit_head, p.remembered.kind) == ("advance", H2, "churn")
        assert "@maint" in p.instruction


def test_an_asked_fixer_s_push_checks_progress_at_once():
    from bot.rules.model import CheckProgress

    asked = replace(SETTINGS, fixer_kind="author")
    working = replace(ROUND, fixer_started_at=T0, attempt=1)
    fixing = replace(PR, status="converging")
    assert kinds(decide_step(snap(pr=fixing, round=working, settings=asked))) == [Wait]
    assert decide_step(snap(pr=fixing, round=working, settings=asked, head=H2)).actions == (CheckProgress(1),)
    # A command fixer reports back itself: a push meanwhile is someone else's.
    assert kinds(decide_step(snap(pr=fixing, round=working, head=H2))) == [Wait]
