"""Reviewers of every kind: each asked its way once per head, the round waiting for the required
ones (each up to its own timeout), and the round's findings coming from all of them."""

from __future__ import annotations

import json
import sys

from bot.fixers import ScriptedFixer
from bot.rules.reviewers import normalise
from simulator import ReviewerScript, ReviewStep, ThreadSpec
from storage import jobs

from .harness import COPILOT, REPO, bot_on_simulator, open_and_enroll

RABBIT, GEMINI, ALICE = "coderabbitai[bot]", "gemini-code-assist[bot]", "alice"
TRIGGER = "@coderabbitai review"
COLLABORATORS = {"maint": "write", "alice": "write"}


def script(login: str, path: str, *, delay: float, **kw) -> ReviewerScript:
    """One thread on `path` in its first review, a clean review after."""
    return ReviewerScript(login=login, delay=delay, steps=[
        ReviewStep(threads=[ThreadSpec(path=path, line=1, body=f"{login} asks for a change in {path}")],
                   body=f"{login}: 1 comment", state="COMMENTED"),
        ReviewStep(threads=[], body=f"{login}: nothing more", state="COMMENTED"),
    ], **kw)


def reviewer_tables(*, rabbit_timeout: float | None = None) -> list[dict]:
    rabbit = {"login": RABBIT, "kind": "comment", "trigger": TRIGGER}
    if rabbit_timeout is not None:
        rabbit["timeout_seconds"] = rabbit_timeout
    return [{"login": COPILOT, "kind": "copilot"}, rabbit,
            {"login": GEMINI, "kind": "automatic"},
            {"login": ALICE, "kind": "request", "required": False}]


def trigger_comments(h, number: int) -> list[str]:
    """The bodies of the bot's trigger comments on PR `number`, from the simulator's state."""
    return [c.body for c in h.sim.state.issue_comments.values()
            if c.number == number and "convergebot:trigger" in c.body]


def copilot_requests(h) -> int:
    routes = h.sim.counters.snapshot()["routes"]
    return sum(sum(by_status.values()) for route, by_status in routes.items()
               if route.startswith("POST ") and route.endswith("/copilot-code-review"))


async def test_each_reviewer_is_asked_its_way_once_per_head_and_the_round_waits_for_every_required_one(
        tmp_path, db_url):
    conv = {"reviewer": reviewer_tables(), "nudge_window_seconds": 600}
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["push"]), convergence=conv,
                                collaborators=COLLABORATORS, poller={"interval_seconds": 0.5}) as h:
        # Copilot answers at once; CodeRabbit (asked by comment) takes longer: Copilot's review
        # alone must not decide the round. Gemini reviews every push unasked; Alice never answers.
        h.sim.set_reviewer(REPO, script(COPILOT, "app/core.py", delay=0.1))
        h.sim.set_reviewer(REPO, script(RABBIT, "app/util.py", delay=1.0, trigger=TRIGGER))
        h.sim.set_reviewer(REPO, script(GEMINI, "README.md", delay=0.1, auto=True))
        key, number = await open_and_enroll(h)

        view = await h.wait_status(key, "merged", timeout=60)
        rounds = await h.rounds(key)
        assert [(r.round_no, r.status) for r in rounds] == [(1, "addressed"), (2, "converged")]
        # Round 1 waited for all three required reviewers: one finding from each of them.
        first = json.loads(rounds[0].findings)
        # (GraphQL names a bot without its `[bot]`, as GitHub does.)
        assert sorted(normalise(f["author"]) for f in first) == sorted(normalise(x) for x in (COPILOT, RABBIT, GEMINI))
        assert sorted(f["path"] for f in first) == ["README.md", "app/core.py", "app/util.py"]

        # Each asked its way, once per head: one trigger comment and one Copilot request a round,
        # nothing posted or requested for Gemini, and Alice (optional) asked but never waited for.
        triggers = trigger_comments(h, number)
        assert len(triggers) == 2 and all(b.startswith(TRIGGER) for b in triggers)
        heads = [r.entry_head for r in rounds]
        assert all(any(f"head={head}" in b for b in triggers) for head in heads)
        assert copilot_requests(h) == 2
        _, pr = h.sim.pr(REPO, number)
        assert ALICE in pr.requested_reviewers  # asked, never answered
        assert view.pr.outcome == "merged"


async def test_a_required_reviewer_that_never_answers_escalates_after_its_own_timeout_naming_it(tmp_path, db_url):
    # Nudged every half second meanwhile: a nudge never posts the trigger again.
    conv = {"reviewer": reviewer_tables(rabbit_timeout=3), "review_wait_timeout_seconds": 600,
            "nudge_window_seconds": 0.5}
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["push"]), convergence=conv,
                                collaborators=COLLABORATORS, poller={"interval_seconds": 0.25}) as h:
        # CodeRabbit has no script: its trigger is posted and nothing answers. Alice neither.
        h.sim.set_reviewer(REPO, script(COPILOT, "app/core.py", delay=0.1))
        h.sim.set_reviewer(REPO, script(GEMINI, "README.md", delay=0.1, auto=True))
        key, number = await open_and_enroll(h)

        view = await h.wait_status(key, "escalated", timeout=30)
        (esc,) = await h.escalations(key)
        assert esc.kind == "review_stalled"
        assert RABBIT in esc.question and "3 seconds" in esc.question
        # Those that answered, and Alice (optional, late), are not named.
        assert COPILOT not in esc.question and GEMINI not in esc.question and ALICE not in esc.question
        nudges = [j for j in await jobs.list_jobs(h.rt.db, key) if ":nudge:" in j.key]
        assert nudges and len(trigger_comments(h, number)) == 1
        # It escalated on its own timeout, long before the global one (600 s).
        assert view.pr.current_round == 1
        # A maintainer's answer asks again, on the same round and head: the trigger is posted
        # once more (its request is a new one), not found as already posted.
        await h.sim.comment(REPO, number, "/converge answer Ask CodeRabbit again.", user="maint")
        await h.wait_for("the trigger posted again", lambda: _async(len(trigger_comments(h, number)) == 2))


async def test_an_optional_reviewer_that_never_answers_does_not_block(tmp_path, db_url):
    tables = [{"login": COPILOT, "kind": "copilot"},
              {"login": ALICE, "kind": "request", "required": False, "timeout_seconds": 1}]
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["push"]),
                                convergence={"reviewer": tables}, collaborators=COLLABORATORS,
                                poller={"interval_seconds": 0.25}) as h:
        h.sim.set_reviewer(REPO, script(COPILOT, "app/core.py", delay=0.1))
        key, _ = await open_and_enroll(h)
        view = await h.wait_status(key, "merged", timeout=60)
        assert await h.escalations(key) == []
        assert [r.status for r in await h.rounds(key)] == ["addressed", "converged"]
        assert view.pr.outcome == "merged"


async def test_a_lost_answer_to_the_trigger_comment_does_not_post_it_twice(tmp_path, db_url):
    tables = [{"login": RABBIT, "kind": "comment", "trigger": TRIGGER}]
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["push"]),
                                convergence={"reviewer": tables}, collaborators=COLLABORATORS,
                                poller={"interval_seconds": 0.5}) as h:
        # Slow to answer: the request's retries come before its review (which would otherwise
        # tell the retry that nobody needs asking).
        h.sim.set_reviewer(REPO, script(RABBIT, "app/util.py", delay=3.0, trigger=TRIGGER))
        # Every issue comment is posted, then answered 502 (the write happened, its answer was lost).
        h.sim.chaos(1, lost_ack_rate=1.0, exclude=[r"^(?!.*/issues/\d+/comments$)"])
        key, number = await open_and_enroll(h)

        await h.wait_for("the trigger comment", lambda: _async(trigger_comments(h, number)))

        async def retried():  # the request effect's retry looked and found its comment
            found = [j for j in await jobs.list_jobs(h.rt.db, key)
                     if j.kind == "effect" and '"request_review"' in j.payload]
            return found and all(j.status == "done" for j in found) and max(j.attempts for j in found) >= 2

        await h.wait_for("the request effect to be retried and done", retried)
        h.sim.chaos_off()
        assert h.sim.chaos_counts.get("lost_ack", 0) >= 1
        view = await h.wait_status(key, "merged", timeout=60)
        rounds = await h.rounds(key)
        # One trigger comment per round (per head), however many tries it took.
        triggers = trigger_comments(h, number)
        assert len(triggers) == len(rounds) == 2
        assert len({b.split("head=")[1].split()[0] for b in triggers}) == 2
        assert view.pr.outcome == "merged"


async def _async(value):
    return value


async def test_a_retried_request_whose_review_lands_between_its_reads_asks_once(tmp_path, db_url):
    """Copilot's request is made and answered 502 (its answer lost); the effect's retry reads
    who is requested and the reviews, and Copilot's review lands between those two reads. Read
    as requested first, then reviews, the review shows in the second: nobody is asked again.
    The other way round it was in neither (the request gone, the review not yet there), and the
    retry bought a second review of the same head."""
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["push"]),
                                poller={"interval_seconds": 3600}) as h:
        # Clean at once, and slower than the request's retry (its backoff is 0.2 s here).
        h.sim.set_reviewer(REPO, ReviewerScript(login=COPILOT, delay=1.0, steps=[
            ReviewStep(threads=[], body="Copilot: nothing to say", state="COMMENTED")]))
        h.sim.chaos(3, lost_ack_rate=1.0, exclude=[r"^(?!.*/pulls/\d+/copilot-code-review$)"])
        gh, held = h.rt.github, []

        def copilot_reviewed() -> bool:
            _, pr = h.sim.pr(REPO, 1)
            return any(h.sim.state.reviews[i].user == COPILOT for i in pr.review_ids)

        def holding(read):
            async def wrapped(*args, **kwargs):
                value = await read(*args, **kwargs)
                in_effect = _called_from("request_review")
                if in_effect and h.sim.chaos_counts.get("lost_ack") and not held:
                    held.append(read.__name__)  # the retry's first read: the review lands now
                    await h.wait_for("Copilot's review of the lost request", lambda: _async(copilot_reviewed()))
                return value
            return wrapped

        gh.reviews, gh.requested_reviewers = holding(gh.reviews), holding(gh.requested_reviewers)
        key, _ = await open_and_enroll(h)
        await h.wait_status(key, "merged", timeout=60)
        routes = h.sim.counters.snapshot()["routes"]
        asked = sum(sum(by_status.values()) for route, by_status in routes.items()
                    if route.startswith("POST ") and route.endswith("/copilot-code-review"))
        assert asked == 1, f"Copilot asked {asked} times for one head"
        assert h.sim.chaos_counts.get("lost_ack") == 1
        assert held == ["requested_reviewers"]



def _called_from(name: str, depth: int = 6) -> bool:
    frame = sys._getframe(2)
    for _ in range(depth):
        if frame is None:
            return False
        if frame.f_code.co_name == name:
            return True
        frame = frame.f_back
    return False
