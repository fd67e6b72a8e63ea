"""A SQLite file's connections: WAL mode set once, the pragmas every connection gets, `BEGIN
IMMEDIATE` for a write transaction and a deferred `BEGIN` for a read one, and aiosqlite's connection
with the statements that need not wait run on the event loop's thread (`LoopConnection`)."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import aiosqlite
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import ConnectionPoolEntry

from .checkpoint import BACKSTOP_AUTOCHECKPOINT_PAGES
from .readonly import READ_ONLY


def ensure_wal(path: Path, patience: float = 30.0) -> None:
    """Put the file in WAL mode once, before any pooled connection opens (WAL is persistent).

    Switching needs the file to itself, and SQLite refuses at once (no busy wait) while another
    process holds a lock, as when several processes start on a new file together: retry.
    """
    deadline = time.monotonic() + patience
    while True:
        try:
            with contextlib.closing(sqlite3.connect(path, timeout=patience)) as conn:
                if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                    conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class LoopConnection(aiosqlite.Connection):
    """aiosqlite's connection, with the statements that need not wait run on the event loop's thread.

    aiosqlite runs every statement on a thread of its own and hands the result back through the
    loop: two thread hand-offs per statement, fetch and cursor, which measured as the largest
    share of the bot's CPU (a GIL hand-over at every hand-off). Reads never wait in WAL mode,
    and neither does anything inside a write transaction once it holds the lock, so they run
    inline, and so do a transaction's end and its `BEGIN IMMEDIATE` when the write lock is free
    (this process's writers take turns on an asyncio lock first, `Database.session`). Only a
    `BEGIN IMMEDIATE` that finds another process holding the write lock goes to the thread, to
    wait there; so do opening and closing.

    A commit does not checkpoint the WAL here: that runs on a thread of its own (`Checkpointer`),
    except SQLite's own automatic checkpoint far past it, a backstop.
    """

    _busy_ms: int | None = None  # the connection's busy_timeout, read once

    # aiosqlite's `_execute` has no annotations: the two calls of it below are untyped calls.
    async def _execute(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        name = getattr(fn, "__name__", None)
        on_connection = isinstance(getattr(fn, "__self__", None), sqlite3.Connection)
        if on_connection and name == "close":
            return await super()._execute(fn, *args, **kwargs)  # type: ignore[no-untyped-call]
        if on_connection and name in ("commit", "rollback"):
            return fn()
        if args and isinstance(args[0], str) and args[0].lstrip()[:15].upper() == "BEGIN IMMEDIATE":
            began, result = self._begin_at_once(fn, args, kwargs)
            if began:
                return result
            # Waits out the other writer.
            return await super()._execute(fn, *args, **kwargs)  # type: ignore[no-untyped-call]
        return fn(*args, **kwargs)

    def _begin_at_once(self, fn: Callable[..., Any], args: tuple[Any, ...],
                       kwargs: dict[str, Any]) -> tuple[bool, Any]:
        """`BEGIN IMMEDIATE` on the loop's thread with no busy wait: (True, its result), or
        (False, None) when another process holds the write lock. The busy timeout is back to
        the connection's own before this returns, for the wait on the thread."""
        conn = self._conn
        if self._busy_ms is None:
            self._busy_ms = int(conn.execute("PRAGMA busy_timeout").fetchone()[0])
        conn.execute("PRAGMA busy_timeout=0").close()
        try:
            return True, fn(*args, **kwargs)
        except sqlite3.OperationalError as e:
            if getattr(e, "sqlite_errorcode", None) != sqlite3.SQLITE_BUSY:
                raise
            return False, None
        finally:
            conn.execute(f"PRAGMA busy_timeout={self._busy_ms}").close()

    def begin_read(self) -> None:
        """A read transaction's deferred `BEGIN`, at once on the loop's thread: it never waits,
        and through SQLAlchemy's statement machinery it cost a fifth of an empty read
        transaction (~50 µs, and a read transaction is most of what a job does)."""
        self._conn.execute("BEGIN").close()


def loop_connector(database: str) -> Callable[[], Awaitable[LoopConnection]]:
    async def connect() -> LoopConnection:
        def connector() -> sqlite3.Connection:
            # Opened on aiosqlite's thread, then used from two threads (never at once): the
            # loop's and aiosqlite's.
            return sqlite3.connect(database, timeout=30, check_same_thread=False)

        # aiosqlite types what awaiting a connection gives as its base class: it is the
        # connection awaited.
        return cast(LoopConnection, await LoopConnection(connector, iter_chunk_size=64))

    return connect


def install_sqlite_hooks(engine: Engine, busy_timeout_ms: int = 5000) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: ConnectionPoolEntry) -> None:
        # `dbapi_conn`: pysqlite's connection, or SQLAlchemy's adapter of aiosqlite's (which
        # SQLAlchemy's DBAPI protocol does not give `isolation_level`).
        # Take transaction control away from pysqlite so our BEGIN below is the only one.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA synchronous=NORMAL")
        # The WAL is the database's `Checkpointer`'s (a file's; in memory there is no WAL):
        # SQLite's own checkpoint, run inside a commit, only as a backstop.
        cur.execute(f"PRAGMA wal_autocheckpoint={BACKSTOP_AUTOCHECKPOINT_PAGES}")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        if conn.get_execution_options().get(READ_ONLY):
            # A read session: deferred, so it takes no write lock (it only reads; the guard
            # of `readonly.py` refuses anything else).
            loop_conn = getattr(conn.connection.dbapi_connection, "_connection", None)
            if isinstance(loop_conn, LoopConnection):
                loop_conn.begin_read()
            else:
                conn.exec_driver_sql("BEGIN")
            return
        # IMMEDIATE takes the write lock up front: a transaction that reads and then writes can
        # otherwise fail with SQLITE_BUSY on upgrade, which busy_timeout does not retry.
        conn.exec_driver_sql("BEGIN IMMEDIATE")
