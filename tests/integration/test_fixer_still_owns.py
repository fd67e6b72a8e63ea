"""The fixer's last question before it pushes: is this attempt still the run's work in progress?

`fixing.still_owns` reads the PR's row and the round's row; each test below makes one of the
writes that can land while an agent works (a retry, a restart at a new head, the round decided
or ended, the row gone on to another round) with the storage call the bot makes for it, and the
answer must turn to no. The whole path (the agent, the withheld push) is tested in
test_fixer_ownership.py and test_fixer_fail_closed.py; here each condition on its own, on a real
database.
"""

from __future__ import annotations

from bot.engine.fixing import still_owns
from storage import prs, rounds
from storage.keys import parse_pr_key
from storage.models import utcnow

from ..helpers import enroll

KEY = parse_pr_key("acme/app#1")
HEAD, LATER = "a" * 40, "b" * 40


async def _at_work(db):
    """Round 1 of a converging run, its fixer dispatched (attempt 0) and started, at HEAD."""
    pk = await enroll(db, str(KEY))
    async with db.session() as s:
        assert await prs.fenced_update(None, KEY, pk, {"status": "converging", "current_round": 1}, session=s)
        await rounds.start(s, KEY, pk, 1, HEAD)
        assert await rounds.next_attempt(s, KEY, pk, 1, {"fixer_started_at": utcnow()}) == 0
    assert await still_owns(db, KEY, pk, 1, 0, HEAD), "the attempt at work owns its push"
    return pk


async def test_an_attempt_retried_at_the_same_head_no_longer_owns_its_push(db):
    # `/converge retry` of a CI or conflict round: a new attempt from the branch as it is, its
    # fixer started at once. Only the attempt's number tells the old agent's push from the new.
    pk = await _at_work(db)
    async with db.session() as s:
        assert await rounds.next_attempt(s, KEY, pk, 1, {
            **rounds.VERDICT_FIELDS, "entry_head": HEAD, "fixer_started_at": utcnow()}) == 1
    assert not await still_owns(db, KEY, pk, 1, 0, HEAD)
    assert await still_owns(db, KEY, pk, 1, 1, HEAD), "the new attempt owns it"


async def test_a_round_restarted_at_a_new_head_no_longer_owns_its_push(db):
    # The step restarts the round where the branch moved: same attempt, a new entry head, no
    # fixer started yet.
    pk = await _at_work(db)
    async with db.session() as s:
        await rounds.start(s, KEY, pk, 1, LATER)
    assert not await still_owns(db, KEY, pk, 1, 0, HEAD)


async def test_a_round_whose_fixer_verdict_is_recorded_no_longer_owns_a_push(db):
    # Another try of the same fix job (its lease lost while the agent ran) finished first and
    # recorded the verdict: the round is the progress check's now.
    pk = await _at_work(db)
    async with db.session() as s:
        assert await rounds.update_round(s, KEY, pk, 1, {"fixer_finished_at": utcnow(), "verdict": "pushed"},
                                         expect_attempt=0, open_only=True)
    assert not await still_owns(db, KEY, pk, 1, 0, HEAD)


async def test_a_round_already_ended_no_longer_owns_a_push(db):
    pk = await _at_work(db)
    async with db.session() as s:
        assert await rounds.update_round(s, KEY, pk, 1, {"status": "addressed"}, expect_attempt=0, open_only=True)
    assert not await still_owns(db, KEY, pk, 1, 0, HEAD)


async def test_a_round_the_row_has_left_no_longer_owns_a_push(db):
    # The row went on to round 2 (converging again) before round 1's row was ended.
    pk = await _at_work(db)
    assert await prs.fenced_update(db, KEY, pk, {"current_round": 2})
    assert not await still_owns(db, KEY, pk, 1, 0, HEAD)
