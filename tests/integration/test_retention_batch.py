"""A compaction batch writes its cut text in one statement per table, however many rounds it cuts:
an ORM update per row made the session match each update against every row it had loaded, and a
500-run batch of a year-old database held the event loop for seconds (bench/year.py)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import event

from storage import retention
from storage.models import utcnow

from .test_retention import _run, _texts


async def test_a_batch_cuts_every_round_in_one_update_per_table(db):
    pks = [await _run(db, f"acme/widgets#{n}", ended_days_ago=100) for n in range(1, 5)]
    updates: list[str] = []

    def seen(conn, cursor, statement, parameters, context, executemany) -> None:
        if statement.lstrip().upper().startswith("UPDATE"):
            updates.append(statement)

    event.listen(db.engine.sync_engine, "before_cursor_execute", seen)
    try:
        swept = await retention.compact_runs(db, utcnow() - timedelta(days=90), limit=10)
    finally:
        event.remove(db.engine.sync_engine, "before_cursor_execute", seen)
    assert (swept.runs_compacted, swept.rounds_compacted, swept.escalations_compacted) == (4, 8, 4)
    for pk in pks:
        assert all(n < 1000 for n in await _texts(db, pk))  # each text cut
    # The rounds' update and the escalations' (the cursor's move is an upsert, not an UPDATE).
    assert len(updates) == 2, updates
