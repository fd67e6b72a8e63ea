"""The round row's compare-and-sets: one rerun per attempt, one result per dispatch."""

from __future__ import annotations

from storage import rounds

from ..helpers import enroll

KEY = "acme/app#1"


async def _round(db) -> str:
    pk = await enroll(db, KEY)
    async with db.session() as s:
        await rounds.start(s, KEY, pk, 1, "a" * 40)
        assert await rounds.next_attempt(s, KEY, pk, 1, {}) == 0
    return pk


async def test_two_checks_of_one_attempt_start_one_rerun(db):
    pk = await _round(db)
    # The fixer's check and the deadline's check of attempt 0, in two processes: only the
    # first compare-and-set renumbers the dispatch; the other finds attempt 1 and loses.
    async with db.session() as s:
        assert await rounds.next_attempt(s, KEY, pk, 1, {}, expect_attempt=0) == 1
    async with db.session() as s:
        assert await rounds.next_attempt(s, KEY, pk, 1, {}, expect_attempt=0) is None
    assert (await rounds.get(db, KEY, pk, 1)).attempt == 1


async def test_a_round_already_decided_is_neither_rerun_nor_decided_again(db):
    pk = await _round(db)
    async with db.session() as s:
        assert await rounds.update_round(s, KEY, pk, 1, {"status": "addressed"}, expect_attempt=0, open_only=True)
    async with db.session() as s:
        assert not await rounds.update_round(s, KEY, pk, 1, {"status": "needs_input"}, expect_attempt=0,
                                             open_only=True)
        assert await rounds.next_attempt(s, KEY, pk, 1, {}, expect_attempt=0) is None
    assert (await rounds.get(db, KEY, pk, 1)).status == "addressed"
