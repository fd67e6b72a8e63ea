"""The async engine and sessions for SQLite (default) and PostgreSQL."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine
from sqlmodel.ext.asyncio.session import AsyncSession

DEFAULT_URL = "sqlite+aiosqlite:///./convergebot.db"


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

    def __init__(self, url: str, *, echo: bool = False) -> None:
        self.url = normalize_url(url)
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
        self.sessions = async_sessionmaker(self.engine, class_=AsyncSession, expire_on_commit=False)

    @property
    def is_postgres(self) -> bool:
        return self.backend == "postgresql"

    @asynccontextmanager
    async def session(self) -> AsyncIterator[AsyncSession]:
        """A session whose work commits on success and rolls back on error."""
        async with self.sessions() as s, s.begin():
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
    def _on_begin(conn) -> None:
        # IMMEDIATE takes the write lock up front: a transaction that reads and then writes can
        # otherwise fail with SQLITE_BUSY on upgrade, which busy_timeout does not retry.
        conn.exec_driver_sql("BEGIN IMMEDIATE")
