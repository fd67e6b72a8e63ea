"""Reviewer kinds: the config model, and the waiting rules over several reviewers (pure)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from bot.config import Config, ConfigError, load_config
from bot.engine.repoconfig import RepoConfigError, parse
from bot.rules import reviewers
from bot.rules.decide import decide_step, fresh_review, missing_reviewers, review_wait_deadlines
from bot.rules.model import (
    Checks,
    Converge,
    Escalate,
    Fix,
    Nudge,
    PrState,
    Review,
    RoundState,
    Settings,
    Snapshot,
    Thread,
    Wait,
)

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
H1 = "1" * 40
COPILOT, RABBIT, GEMINI = "copilot-pull-request-reviewer[bot]", "coderabbitai[bot]", "gemini-code-assist[bot]"
PR = PrState(pr_key="o/r#1", status="waiting_review", current_round=1, max_rounds=5, waiting_since=T0,
             last_review_id=100, last_nudge_at=T0, last_round_head=H1, husk_retries=0, escalated_at=None)
ROUND = RoundState(round_no=1, entry_head=H1, review_id=None, findings=None, fixer_started_at=None,
                   fixer_finished_at=None, verdict=None, summary=None, question=None, status=None)
ROSTER = (
    reviewers.Reviewer(COPILOT, "copilot"),
    reviewers.Reviewer(RABBIT, "comment", trigger="@coderabbitai review", timeout=timedelta(minutes=5)),
    reviewers.Reviewer(GEMINI, "automatic", default_severity="minor"),
    reviewers.Reviewer("alice", "request", required=False),
)


def settings(roster=ROSTER) -> Settings:
    return Settings(reviewers=tuple(r.login for r in roster), review_wait_timeout=timedelta(minutes=30),
                    nudge_window=timedelta(minutes=10), heal_grace=timedelta(minutes=5), fixer_kind="fake",
                    bot_login="convergebot[bot]", reviewer_specs=roster)


def review(id, user, at=T0 + timedelta(minutes=1), state="COMMENTED"):
    # GitHub names a bot in a review as `login[bot]`; the rules compare without the suffix.
    return Review(id=id, user=user, state=state, commit_id=H1, submitted_at=at)


def thread(id, author, path):
    return Thread(id=id, is_resolved=False, is_outdated=False, path=path, line=1, comment_id=9,
                  body=f"{author} asks", author=author.removesuffix("[bot]"))


def snap(reviews=(), threads=(), now=T0 + timedelta(minutes=2), roster=ROSTER, pr=PR) -> Snapshot:
    return Snapshot(pr=pr, round=ROUND, head=H1, reviews=tuple(reviews), threads=tuple(threads),
                    checks=Checks("success"), open_escalations=0, adjudications={}, now=now,
                    settings=settings(roster))


ALL_REQUIRED = (review(101, COPILOT), review(102, "coderabbitai[bot]"), review(103, "gemini-code-assist[bot]"))


class TestConfig:
    def test_the_old_list_still_means_copilot_by_its_endpoint_and_the_rest_by_request_all_required(self):
        config = Config.model_validate({"convergence": {"reviewers": [COPILOT, "alice"]}})
        assert [(r.login, r.kind, r.required, r.timeout) for r in reviewers.roster(config)] == [
            (COPILOT, "copilot", True, None), ("alice", "request", True, None)]

    def test_tables_are_the_list_when_given(self, tmp_path):
        path = tmp_path / "c.toml"
        path.write_text('[[convergence.reviewer]]\nlogin = "coderabbitai[bot]"\nkind = "comment"\n'
                        'trigger = "@coderabbitai review"\nrequired = false\ntimeout_seconds = 90\n'
                        'default_severity = "minor"\n')
        (rabbit,) = reviewers.roster(load_config(path, env={}))
        assert rabbit == reviewers.Reviewer(RABBIT, "comment", "@coderabbitai review", False,
                                            timedelta(seconds=90), "minor")

    @pytest.mark.parametrize("tables, message", [
        ([{"login": RABBIT, "kind": "comment"}], "is asked by comment but has no trigger"),
        ([{"login": "alice"}, {"login": "Alice"}], "'Alice' is listed twice"),
        ([{"login": COPILOT}, {"login": "copilot-pull-request-reviewer"}], "is listed twice"),
        ([{"login": "alice", "kind": "robot"}], "convergence.reviewer.0.kind"),
        ([{"login": "alice", "timeout_seconds": 0}], "convergence.reviewer.0.timeout_seconds"),
        ([{"login": "alice", "default_severity": "blocker"}], "default_severity"),
    ])
    def test_bad_tables_are_one_line_errors_naming_the_key(self, tmp_path, tables, message):
        import json

        path = tmp_path / "c.toml"
        lines = []
        for t in tables:
            lines.append("[[convergence.reviewer]]")
            lines += [f"{k} = {json.dumps(v)}" for k, v in t.items()]
        path.write_text("\n".join(lines) + "\n")
        with pytest.raises(ConfigError) as e:
            load_config(path, env={})
        assert message in str(e.value) and "\n" not in str(e.value)

    def test_a_repository_may_set_tables_and_its_own_list_replaces_global_tables(self):
        base = Config.model_validate({"convergence": {"reviewer": [{"login": COPILOT}]}})
        tables = parse('[[convergence.reviewer]]\nlogin = "coderabbitai[bot]"\nkind = "comment"\n'
                       'trigger = "@coderabbitai review"\n', base)
        assert [r.kind for r in reviewers.roster(tables)] == ["comment"]
        listed = parse('[convergence]\nreviewers = ["alice"]\n', base)
        assert [(r.login, r.kind) for r in reviewers.roster(listed)] == [("alice", "request")]
        with pytest.raises(RepoConfigError, match="no trigger"):
            parse('[[convergence.reviewer]]\nlogin = "x"\nkind = "comment"\n', base)

    def test_default_severity_by_login_and_major_for_anyone_else(self):
        s = settings()
        assert reviewers.default_severity(s, "gemini-code-assist") == "minor"  # as GraphQL names it
        assert reviewers.default_severity(s, GEMINI) == "minor"
        assert reviewers.default_severity(s, COPILOT) == "major"
        assert reviewers.default_severity(s, "stranger") == "major"
        assert reviewers.default_severity(s, None) == "major"
        config = Config.model_validate({"convergence": {"reviewer": [{"login": "bob", "default_severity": "nit"}]}})
        assert reviewers.default_severity(config, "BOB") == "nit"


class TestWaiting:
    def test_the_round_waits_until_every_required_reviewer_has_a_fresh_review(self):
        # Copilot answered first: it does not decide the round on its own.
        early = snap(reviews=ALL_REQUIRED[:1], threads=(thread("T1", COPILOT, "a.py"),))
        assert fresh_review(early) is None
        assert [r.login for r in missing_reviewers(early)] == [RABBIT, GEMINI]
        (wait,) = decide_step(early).actions
        assert isinstance(wait, Wait) and RABBIT in wait.reason and GEMINI in wait.reason

    def test_then_it_decides_on_the_findings_of_all_of_them(self):
        threads = (thread("T1", COPILOT, "a.py"), thread("T2", RABBIT, "b.py"), thread("T3", GEMINI, "c.py"))
        s = snap(reviews=ALL_REQUIRED, threads=threads)
        assert fresh_review(s).id == 103  # the newest: later rounds count reviews after it
        (fix,) = [a for a in decide_step(s).actions if isinstance(a, Fix)]
        assert sorted(f.thread_id for f in fix.findings) == ["T1", "T2", "T3"]

    def test_an_optional_reviewer_is_never_waited_for_and_its_review_is_not_needed(self):
        s = snap(reviews=ALL_REQUIRED)
        assert decide_step(s).actions == (Converge(103, H1),)
        assert "alice" not in [r.login for r in missing_reviewers(s)]

    def test_a_required_reviewer_past_its_own_timeout_escalates_naming_it(self):
        reviews = (review(101, COPILOT), review(103, GEMINI))
        assert isinstance(decide_step(snap(reviews=reviews, now=T0 + timedelta(minutes=4))).actions[0], Wait)
        (esc,) = decide_step(snap(reviews=reviews, now=T0 + timedelta(minutes=5))).actions
        assert isinstance(esc, Escalate) and esc.kind == "review_stalled"
        assert RABBIT in esc.question and "5 minutes" in esc.question and COPILOT not in esc.question

    def test_the_global_timeout_stands_for_reviewers_without_their_own(self):
        reviews = (review(102, RABBIT), review(103, GEMINI))
        assert isinstance(decide_step(snap(reviews=reviews, now=T0 + timedelta(minutes=29))).actions[-1], Wait)
        (esc,) = decide_step(snap(reviews=reviews, now=T0 + timedelta(minutes=30))).actions
        assert isinstance(esc, Escalate) and COPILOT in esc.question and RABBIT not in esc.question

    def test_a_late_optional_reviewer_never_escalates(self):
        roster = (reviewers.Reviewer(COPILOT, "copilot"),
                  reviewers.Reviewer("alice", required=False, timeout=timedelta(minutes=1)))
        s = snap(reviews=(review(101, COPILOT),), roster=roster, now=T0 + timedelta(hours=2))
        assert decide_step(s).actions == (Converge(101, H1),)

    def test_with_nobody_required_the_first_review_of_anyone_who_counts_ends_the_wait(self):
        roster = (reviewers.Reviewer(COPILOT, "copilot", required=False),)
        assert fresh_review(snap(reviews=(review(101, COPILOT),), roster=roster)).id == 101
        assert fresh_review(snap(reviews=(), roster=roster)) is None
        (esc,) = decide_step(snap(roster=roster, now=T0 + timedelta(minutes=30))).actions
        assert isinstance(esc, Escalate) and "30 minutes" in esc.question

    def test_an_automatic_reviewers_review_of_the_head_counts_even_from_before_the_round(self):
        # It reviewed the push before the round began waiting (and before the baseline id).
        before = review(90, GEMINI, at=T0 - timedelta(minutes=1))
        s = snap(reviews=(review(101, COPILOT), review(102, RABBIT), before))
        assert fresh_review(s).id == 102
        # A review by anyone else from before the round does not count.
        stale = snap(reviews=(review(90, COPILOT, at=T0 - timedelta(minutes=1)), review(102, RABBIT), before))
        assert [r.login for r in missing_reviewers(stale)] == [COPILOT]

    def test_an_automatic_review_an_earlier_round_on_this_head_decided_on_is_not_replayed(self):
        # Round 1 decided on Gemini's review 90 of the head and pushed nothing (the fixer found
        # nothing to change): round 2 on the same head waits for a new one instead of replaying it.
        before = review(90, GEMINI, at=T0 - timedelta(minutes=1))
        s = snap(reviews=(review(101, COPILOT), review(102, RABBIT), before))
        round_1 = RoundState(round_no=1, entry_head=s.head, review_id=102, findings=(), fixer_started_at=T0,
                             fixer_finished_at=T0, verdict="converged", summary=None, question=None,
                             status="addressed")
        again = replace(s, history=(round_1,))
        assert [r.login for r in missing_reviewers(again)] == [GEMINI]
        # After a push the same rule lets it count again.
        moved = replace(again, history=(replace(round_1, entry_head="0" * 40),))
        assert missing_reviewers(moved) == ()

    def test_the_review_timeout_comes_due_at_the_shortest_required_timeout(self):
        timeout_at, _ = review_wait_deadlines(T0, T0, T0, settings())
        assert timeout_at == T0 + timedelta(minutes=5)
        only_optional = (reviewers.Reviewer("alice", required=False, timeout=timedelta(minutes=1)),)
        timeout_at, _ = review_wait_deadlines(T0, T0, T0, settings(only_optional))
        assert timeout_at == T0 + timedelta(minutes=30)

    def test_nudges_still_come_once_per_window_while_waiting(self):
        roster = (reviewers.Reviewer(COPILOT, "copilot"), reviewers.Reviewer(RABBIT, "comment", trigger="@x"))
        s = snap(reviews=ALL_REQUIRED[:1], roster=roster, now=T0 + timedelta(minutes=10))
        assert [type(a) for a in decide_step(s).actions] == [Nudge, Wait]
        nudged = replace(PR, last_nudge_at=T0 + timedelta(minutes=3))
        assert [type(a) for a in decide_step(snap(reviews=ALL_REQUIRED[:1], roster=roster, pr=nudged,
                                                  now=T0 + timedelta(minutes=4))).actions] == [Wait]
