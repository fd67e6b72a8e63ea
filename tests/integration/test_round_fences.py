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


async def test_a_retry_that_read_a_round_the_progress_check_ended_restarts_nothing(bare_runtime, monkeypatch):
    """`/converge retry` reads round 1; the progress check then opens round 2 (waiting for its
    review, a status a retry takes). The retry must lose, not restart round 2 as round 1 and
    wipe round 1's result."""
    import bot.engine.commands as handle
    from bot.rules.commands import Command
    from storage import prs
    from storage.keys import parse_pr_key

    rt = bare_runtime()
    db = rt.db
    pk = await _round(db)
    assert await prs.fenced_update(db, KEY, pk, {"status": "waiting_review"})
    read = rounds.get

    async def get_then_advance(db_, pr_key, process_key, round_no):
        found = await read(db_, pr_key, process_key, round_no)
        async with db.session() as s:  # the progress check's decision, committed meanwhile
            assert await rounds.update_round(s, KEY, pk, 1, {"status": "addressed"}, expect_attempt=0, open_only=True)
            assert await prs.fenced_update(None, KEY, pk, {"current_round": 2, "status": "waiting_review"}, session=s)
            await rounds.start(s, KEY, pk, 2, "b" * 40)
        return found

    monkeypatch.setattr(handle.rounds, "get", get_then_advance)
    ok, said = await handle.execute(rt, parse_pr_key(KEY), Command("retry"), "maint")

    assert (ok, said) == (False, "The run moved on meanwhile; try again.")
    view = await prs.get(db, KEY)
    assert (view.pr.current_round, view.pr.status) == (2, "waiting_review")
    assert (await read(db, KEY, pk, 1)).status == "addressed"


async def test_declines_decided_from_a_round_the_row_has_left_post_nothing(bare_runtime):
    """A step decided to decline a finding of round 1 (answered from memory, resolved); before
    it wrote, the row moved to round 2. The "Declined" replies must not go out alone: they
    commit with the fence on the round, or not at all."""
    import structlog

    from bot.engine import outbox
    from bot.engine.step import _apply
    from bot.rules.model import Finding, Fix
    from storage import prs

    rt = bare_runtime()
    db = rt.db
    pk = await _round(db)
    assert await prs.fenced_update(db, KEY, pk, {"status": "waiting_review"})
    read = (await prs.get(db, KEY)).pr
    decline = Fix(review_id=7, findings=(), instructions=(), declines=(
        (Finding("PRRT_1", 101, "app.py", 1, "rename x", "bob", "fp-1"), "Declined: answered before."),))
    assert await prs.fenced_update(db, KEY, pk, {"current_round": 2})

    assert not await _apply(rt, read, decline, structlog.get_logger())
    assert not await outbox.pending(db, KEY, "reply")
    # The same decision from the row as it is goes out.
    assert not await _apply(rt, (await prs.get(db, KEY)).pr, decline, structlog.get_logger())
    assert await outbox.pending(db, KEY, "reply")


async def test_an_answer_and_a_retry_at_once_take_the_rows_in_one_order(bare_runtime):
    """PostgreSQL: a retry holds the PR row and then marks the open escalations stale, while an
    answer of one of them writes both. Had the answer taken its escalation before the PR row,
    each would wait for the other (a deadlock, one of them aborted); taking the PR row first,
    it waits for the retry and then loses to it."""
    import asyncio

    import bot.engine.commands as handle
    from bot.rules.commands import Command
    from storage import escalations, prs

    from ..helpers import lock_waiter, until

    rt = bare_runtime()
    db = rt.db
    if not db.is_postgres:
        import pytest

        pytest.skip("SQLite: this process's writers take turns")
    pk = await _round(db)
    assert await prs.fenced_update(db, KEY, pk, {"status": "escalated"})
    async with db.session() as s:
        esc = await escalations.create(s, KEY, pk, 1, "needs_input", "Which API?", "fp-q")
    escalated = (await prs.get(db, KEY)).pr

    retry = db.session()
    s = await retry.__aenter__()
    try:  # the retry's transaction, as `execute` writes it: the PR row, then the escalations
        assert await prs.fenced_update(None, KEY, pk, {"status": "converging"},
                                       expect_status="escalated", expect_round=1, session=s)
        answer = asyncio.create_task(handle.answer(rt, escalated, Command("answer", text="v2"), "maint"))
        await until("the answer waiting for a row the retry holds", lambda: lock_waiter(db))
        assert await escalations.mark_open_stale(s, KEY) == 1
    finally:
        await retry.__aexit__(None, None, None)

    assert await asyncio.wait_for(answer, timeout=30) == (False, "The run moved on meanwhile; nothing was changed.")
    assert [(e.id, e.status) for e in await escalations.for_pr(db, KEY)] == [(esc.id, "stale")]
