"""The poller's and the watchdog's read of the unfinished PRs (`prs.unfinished_read`) goes
through the status index on both backends: read as `NOT IN` the final statuses it scanned the
whole history on every tick and watchdog pass (bench/year.py)."""

from __future__ import annotations

from sqlalchemy import text

from storage import prs
from storage.database import Database


async def test_the_unfinished_prs_are_read_through_the_status_index(db: Database):
    async with db.engine.connect() as conn:
        sql = str(prs.unfinished_read().compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
        if db.is_postgres:
            # An empty table is read whole by a planner left to itself: ask whether it can use the index.
            await conn.execute(text("SET enable_seqscan = off"))
            plan = (await conn.execute(text(f"EXPLAIN {sql}"))).scalars().all()
        else:
            plan = [row[-1] for row in (await conn.execute(text(f"EXPLAIN QUERY PLAN {sql}"))).all()]
    assert any("ix_pull_requests_status" in line for line in plan), plan
    assert not any("Seq Scan on pull_requests" in line or line.startswith("SCAN pull_requests") for line in plan), plan
