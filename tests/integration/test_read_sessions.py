"""Read sessions: reads that never take SQLite's write lock, and that cannot write, on both backends."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from storage import adjudications, deliveries, escalations, prs, rounds
from storage.database import Database
from storage.models import Job, utcnow
from storage.readonly import ReadOnlyViolation

from ..helpers import enroll

KEY = "acme/w#1"


@contextlib.contextmanager
def sqlite_writer_holding_the_lock(db: Database):
    """Another connection (as another process would) in the middle of a write transaction."""
    conn = sqlite3.connect(make_url(db.url).database, timeout=0, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE pull_requests SET title = 'being written' WHERE pr_key = ?", (KEY,))
        yield conn
        conn.execute("ROLLBACK")
    finally:
        conn.close()


async def test_the_read_getters_run_while_another_connection_holds_the_write_lock(db):
    if db.is_postgres:
        pytest.skip("SQLite's single writer lock; PostgreSQL readers never wait for writers")
    pk = await enroll(db, KEY)
    with sqlite_writer_holding_the_lock(db):
        started = time.monotonic()
        view = await prs.get(db, KEY)
        listed = await prs.list_all(db)
        await rounds.get(db, KEY, pk, 1)
        await rounds.history(db, KEY, pk)
        await rounds.for_pr(db, KEY)
        await escalations.open_for(db, KEY)
        await escalations.for_pr(db, KEY)
        await escalations.get(db, 1)
        await adjudications.live_for(db, KEY)
        await deliveries.get(db, "d1")
        await deliveries.count(db)
        took = time.monotonic() - started
        # None of them waited for the writer (busy_timeout is 5 s), and WAL shows them the last
        # committed state, not the uncommitted title.
        assert took < 2.0, took
        assert view.pr.process_key == pk and view.pr.title != "being written"
        assert [v.pr.pr_key for v in listed] == [KEY]
        # A write session does wait for the lock (and gives up here, within the test's patience).
        db.read_sessions = False
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(prs.get(db, KEY), timeout=0.5)


async def test_the_database_stays_in_wal_mode(db):
    if db.is_postgres:
        pytest.skip("SQLite only")
    async with db.read_session() as s:
        mode = (await s.exec(text("PRAGMA journal_mode"))).one()[0]
    assert mode.lower() == "wal"


@pytest.mark.parametrize("statement", [
    "UPDATE pull_requests SET title = 'x'",
    "DELETE FROM pull_requests",
    "INSERT INTO commands (pr_key) VALUES ('x')",
    "  update pull_requests set title = 'x'",
    "WITH t AS (SELECT 1) UPDATE pull_requests SET title = 'x'",
    "PRAGMA journal_mode=DELETE",
])
async def test_a_write_in_a_read_session_is_refused_and_changes_nothing(db, statement):
    await enroll(db, KEY)
    with pytest.raises(ReadOnlyViolation):
        async with db.read_session() as s:
            await s.exec(text(statement))
    assert (await prs.get(db, KEY)).pr.title != "x"


async def test_an_orm_write_in_a_read_session_is_refused(db):
    with pytest.raises(ReadOnlyViolation):
        async with db.read_session() as s:
            s.add(Job(kind="sync", key="k", payload="{}", run_at=utcnow(), attempts=0, max_attempts=1,
                      status="queued", created_at=utcnow()))
    async with db.read_session() as s:
        assert (await s.exec(text("SELECT count(*) FROM jobs"))).one()[0] == 0


async def test_a_fenced_write_through_a_read_session_is_refused(db):
    pk = await enroll(db, KEY)
    with pytest.raises(ReadOnlyViolation):
        async with db.read_session() as s:
            await prs.fenced_update(None, KEY, pk, {"title": "x"}, session=s)
    assert (await prs.get(db, KEY)).pr.title != "x"


async def test_postgres_runs_a_read_session_as_a_read_only_transaction(db):
    if not db.is_postgres:
        pytest.skip("PostgreSQL only")
    async with db.read_session() as s:
        assert (await s.exec(text("SHOW transaction_read_only"))).one()[0] == "on"
    async with db.session() as s:
        assert (await s.exec(text("SHOW transaction_read_only"))).one()[0] == "off"


async def test_a_connection_used_by_a_read_session_writes_again_afterwards(db):
    """The read-only marks belong to the session, not to the pooled connection it used."""
    await enroll(db, KEY)
    for _ in range(3):  # more sessions than it takes to reuse a pooled connection
        async with db.read_session() as s:
            await s.exec(text("SELECT 1"))
        async with db.session() as s:
            await s.exec(text("UPDATE pull_requests SET title = 'written'"))
    assert (await prs.get(db, KEY)).pr.title == "written"


async def test_with_read_sessions_off_the_getters_use_write_transactions(db):
    await enroll(db, KEY)
    db.read_sessions = False
    async with db.read_session() as s:
        await s.exec(text("UPDATE pull_requests SET title = 'allowed'"))
    assert (await prs.get(db, KEY)).pr.title == "allowed"
