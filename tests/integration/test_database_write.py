"""`Database.write`: a short synchronous write transaction, inline on SQLite when it can be.

On both backends it commits what the function did, undoes it all on an error, and runs the
function once. On SQLite, when another connection (another process) holds the write lock, it
neither fails nor blocks the event loop: it waits as any write session does.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Iterator

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlmodel import Session

from storage import jobs
from storage.database import Database

from ..helpers import enroll

KEY = "acme/w#1"


def rename(session: Session, title: str, calls: list[str]) -> str:
    calls.append(title)
    session.exec(text("UPDATE pull_requests SET title = :t WHERE pr_key = :k").bindparams(t=title, k=KEY))
    return title


async def title(db: Database) -> str:
    async with db.read_session() as s:
        return (await s.exec(text("SELECT title FROM pull_requests WHERE pr_key = :k").bindparams(k=KEY))).one()[0]


async def test_a_write_commits_once_and_an_error_undoes_all_of_it(db):
    await enroll(db, KEY)
    calls: list[str] = []
    assert await db.write(rename, "first", calls) == "first"
    assert await title(db) == "first" and calls == ["first"]

    def rename_then_fail(session: Session) -> None:
        rename(session, "never", calls)
        jobs.queue_wakes(session, [dict(kind="command", key="cmd:1", pr_key=KEY)])
        raise RuntimeError("injected")

    with pytest.raises(RuntimeError, match="injected"):
        await db.write(rename_then_fail)
    assert await title(db) == "first" and calls == ["first", "never"]
    assert await jobs.list_jobs(db) == []


def rename_plain(conn: sqlite3.Connection, title: str, _calls: list[str]) -> str:
    conn.execute("UPDATE pull_requests SET title = ? WHERE pr_key = ?", (title, KEY))
    return title


async def test_a_plain_write_undoes_an_error_and_the_next_one_still_commits(db):
    """`write`'s `plain` function on SQLite's connection it keeps between writes: an error
    rolls back and leaves it usable; one that leaves it broken (closed here) makes the next
    write take another."""
    if db.is_postgres:
        pytest.skip("the plain path is SQLite's")
    await enroll(db, KEY)
    assert await db.write(rename, "first", [], plain=rename_plain) == "first"

    def fail(conn: sqlite3.Connection, title: str, calls: list[str]) -> None:
        rename_plain(conn, title, calls)
        raise RuntimeError("injected")

    with pytest.raises(RuntimeError, match="injected"):
        await db.write(rename, "never", [], plain=fail)
    assert await title(db) == "first"
    assert await db.write(rename, "second", [], plain=rename_plain) == "second"

    def break_it(conn: sqlite3.Connection, title: str, calls: list[str]) -> None:
        rename_plain(conn, title, calls)
        conn.close()  # its ROLLBACK then fails too

    with pytest.raises(sqlite3.ProgrammingError):
        await db.write(rename, "lost", [], plain=break_it)
    assert await title(db) == "second"
    assert await db.write(rename, "third", [], plain=rename_plain) == "third"
    assert await title(db) == "third"


@contextlib.contextmanager
def another_process_writing(db: Database) -> Iterator[sqlite3.Connection]:
    """Another connection to the file (as another process would have) holding SQLite's write
    lock, with a change of its own to the PR's title, until the block commits it or ends."""
    other = sqlite3.connect(make_url(db.url).database, timeout=0, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("UPDATE pull_requests SET title = 'theirs' WHERE pr_key = ?", (KEY,))
        yield other
    finally:
        with contextlib.suppress(sqlite3.Error):
            other.execute("ROLLBACK")
        other.close()


async def waits_while_the_loop_goes_on(write: asyncio.Task) -> None:
    """`write` is still waiting after 20 ticks of the loop, and no tick was held up: a write
    waiting on the loop's thread would hold every other task for the busy timeout (5 s here);
    a tick takes ~10 ms."""
    loop = asyncio.get_running_loop()
    gaps, last = [], loop.time()
    async with asyncio.timeout(10):
        for _ in range(20):
            await asyncio.sleep(0.01)
            gaps.append(loop.time() - last)
            last = loop.time()
    assert not write.done()
    assert max(gaps) < 2.5


async def test_a_write_waits_without_blocking_the_loop_while_another_process_writes(db):
    if db.is_postgres:
        pytest.skip("SQLite's single writer lock")
    await enroll(db, KEY)
    calls: list[str] = []
    with another_process_writing(db) as other:
        write = asyncio.create_task(db.write(rename, "ours", calls))
        await waits_while_the_loop_goes_on(write)
        other.execute("COMMIT")
        assert await asyncio.wait_for(write, 10) == "ours"
    assert await title(db) == "ours" and calls == ["ours"]


async def test_a_write_session_waits_without_blocking_the_loop_while_another_process_writes(db):
    """A session's `BEGIN IMMEDIATE` runs on the loop's thread only when the write lock is free
    at once: held by another process, it waits on aiosqlite's thread for as long as the
    connection's busy timeout allows, and the loop goes on meanwhile."""
    if db.is_postgres:
        pytest.skip("SQLite's single writer lock")
    await enroll(db, KEY)  # a write session that found the lock free: its BEGIN ran inline

    async def rename_in_session(title: str) -> None:
        async with db.session() as s:
            await s.exec(text("UPDATE pull_requests SET title = :t WHERE pr_key = :k").bindparams(t=title, k=KEY))

    with another_process_writing(db) as other:
        write = asyncio.create_task(rename_in_session("ours"))
        await waits_while_the_loop_goes_on(write)
        other.execute("COMMIT")
        await asyncio.wait_for(write, 10)
    assert await title(db) == "ours"
    await rename_in_session("again")  # the lock free again: inline, and committed
    assert await title(db) == "again"
