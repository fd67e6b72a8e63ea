"""The async engine and sessions for SQLite (default) and PostgreSQL."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from sqlalchemy import event
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine
from sqlmodel.ext.asyncio.session import AsyncSession

DEFAULT_URL = "sqlite+aiosqlite:///./convergebot.db"

# The execution option that marks a read session's connection (see `Database.read_session`).
READ_ONLY = "convergebot_read_only"


class ReadOnlyViolation(RuntimeError):
    """A statement other than a read was sent through a read session."""


def normalize_url(url: str) -> str:
    """Accept the URLs people paste (`sqlite:///x.db`, `postgresql://…`) and pick the async driver."""
    u = make_url(url)
    if u.get_backend_name() == "sqlite":
        return u.set(drivername="sqlite+aiosqlite").render_as_string(hide_password=False)
    if u.get_backend_name() == "postgresql":
        return u.set(drivername="postgresql+asyncpg").render_as_string(hide_password=False)
    raise ValueError(f"database.url: unsupported backend {u.get_backend_name()!r} (use sqlite or postgresql)")


class Database:
    """One engine per process. Sessions are short: never hold one across a GitHub call."""

    def __init__(self, url: str, *, echo: bool = False, read_sessions: bool = True) -> None:
        self.url = normalize_url(url)
        # False: `read_session` is a plain `session` (a write transaction), as before read
        # sessions existed; the benchmarks flip it to compare.
        self.read_sessions = read_sessions
        parsed = make_url(self.url)
        self.backend = parsed.get_backend_name()
        if self.backend == "sqlite":
            if parsed.database and parsed.database != ":memory:":
                path = Path(parsed.database).expanduser().resolve()
                path.parent.mkdir(parents=True, exist_ok=True)
                _ensure_wal(path)
            self.engine: AsyncEngine = create_async_engine(
                self.url, echo=echo, connect_args={"timeout": 30}
            )
            _install_sqlite_hooks(self.engine)
        else:
            self.engine = create_async_engine(self.url, echo=echo, pool_size=10, max_overflow=10)
        _install_read_only_guard(self.engine)
        self.sessions = async_sessionmaker(self.engine, class_=AsyncSession, expire_on_commit=False)

    @property
    def is_postgres(self) -> bool:
        return self.backend == "postgresql"

    @asynccontextmanager
    async def session(self) -> AsyncIterator[AsyncSession]:
        """A session whose work commits on success and rolls back on error."""
        async with self.sessions() as s, s.begin():
            yield s

    @asynccontextmanager
    async def read_session(self) -> AsyncIterator[AsyncSession]:
        """A session for reads only: it never takes SQLite's write lock.

        On SQLite a plain deferred `BEGIN` (in WAL mode readers neither wait for the writer nor
        hold it up), on PostgreSQL a `READ ONLY` transaction. Anything but a read sent through
        it is refused (`ReadOnlyViolation`) before it reaches the database: a deferred SQLite
        transaction that read and then wrote could fail on the lock upgrade, which busy_timeout
        does not retry.
        """
        if not self.read_sessions:
            async with self.session() as s:
                yield s
            return
        options = {READ_ONLY: True}
        if self.is_postgres:
            options["postgresql_readonly"] = True
        async with self.sessions() as s, s.begin():
            # Procured (and begun) here, with the option on: the begin hook sees it.
            await s.connection(execution_options=options)
            yield s

    async def dispose(self) -> None:
        await self.engine.dispose()


def _ensure_wal(path: Path, patience: float = 30.0) -> None:
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


def _install_sqlite_hooks(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_conn, _record) -> None:
        # Take transaction control away from pysqlite so our BEGIN below is the only one.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA busy_timeout=5000")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        if conn.get_execution_options().get(READ_ONLY):
            # A read session: deferred, so it takes no write lock (it only reads; the guard
            # below refuses anything else).
            conn.exec_driver_sql("BEGIN")
            return
        # IMMEDIATE takes the write lock up front: a transaction that reads and then writes can
        # otherwise fail with SQLITE_BUSY on upgrade, which busy_timeout does not retry.
        conn.exec_driver_sql("BEGIN IMMEDIATE")


_READS = ("select", "with", "show", "pragma", "explain", "begin", "savepoint", "release", "rollback", "commit")


def _install_read_only_guard(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "before_cursor_execute")
    def _refuse_writes(conn, _cursor, statement, _params, _context, _executemany) -> None:
        if not conn.get_execution_options().get(READ_ONLY):
            return
        head = statement.lstrip().split(None, 1)[0].lower() if statement.strip() else ""
        if (head not in _READS or (head == "with" and _writes(statement))
                or (head == "pragma" and "=" in statement)):  # a pragma that sets, e.g. journal_mode
            raise ReadOnlyViolation(f"a read session cannot run {statement.strip()[:60]!r}")


def _writes(statement: str) -> bool:
    # A CTE may front an INSERT/UPDATE/DELETE: look past it.
    lowered = statement.lower()
    return any(f" {verb} " in f" {lowered} " for verb in ("insert", "update", "delete"))
