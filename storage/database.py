"""The database: one async engine per process on SQLite (default) or PostgreSQL, and the ways to
use it: a write session (on SQLite taken in turn with this process's other writers), a read
session that never takes SQLite's write lock, a short write run on the event loop's thread
(`write`), and a PR's turn across replicas (`exclusive`)."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine
from sqlalchemy.pool import PoolProxiedConnection
from sqlmodel import Session
from sqlmodel.ext.asyncio.session import AsyncSession

from .checkpoint import Checkpointer
from .readonly import READ_ONLY, install_read_only_guard
from .sqlite import ensure_wal, install_sqlite_hooks, loop_connector
from .urls import NoDatabase, normalize_url

T = TypeVar("T")

# What an inline write attempt gives: (True, the write's result), or (False, None) when it did
# not begin (another process held the write lock).
_Attempt = tuple[Literal[True], T] | tuple[Literal[False], None]

# How long a write session waits for this process's other SQLite writers before it gives up, as
# SQLite's own busy wait would (the lock below is that wait, for the writers of this process).
WRITER_PATIENCE_SECONDS = 30.0
# A dead peer is noticed after about 10 + 3 * 5 seconds of silence.
PG_KEEPALIVES = {"tcp_keepalives_idle": "10", "tcp_keepalives_interval": "5", "tcp_keepalives_count": "3"}
# The first key of `exclusive`'s two-key advisory locks ("conv"), apart from other users' locks.
_PG_EXCLUSIVE_NAMESPACE = 0x636F6E76


class Database:
    """One engine per process. Sessions are short: never hold one across a GitHub call."""

    def __init__(self, url: str, *, echo: bool = False, read_sessions: bool = True, pool_size: int = 10,
                 create: bool = True) -> None:
        """`create=False` (the read-only commands): a SQLite file that is not there is `NoDatabase`,
        not a new empty file."""
        self.url = normalize_url(url)
        # False: `read_session` is a plain `session` (a write transaction), as before read
        # sessions existed; the benchmarks flip it to compare.
        self.read_sessions = read_sessions
        parsed = make_url(self.url)
        self.backend = parsed.get_backend_name()
        # A plain (not async) engine on the same SQLite file, for `write`'s short transactions
        # run on the event loop's own thread. None elsewhere.
        self._inline: Engine | None = None
        # The inline engine's connection `_write_plain` runs on, held from its first use to
        # `dispose` (the pool's proxy; None until then).
        self._plain: PoolProxiedConnection | None = None
        self.sqlite_file: Path | None = None  # the database file, on SQLite
        # Checkpoints a SQLite file's WAL off the event loop's thread; None elsewhere.
        self.checkpointer: Checkpointer | None = None
        if self.backend == "sqlite":
            if parsed.database and parsed.database != ":memory:":
                path = self.sqlite_file = Path(parsed.database).expanduser().resolve()
                if not create and not path.is_file():
                    raise NoDatabase(f"database {path} does not exist: create it with `convergebot migrate`")
                if not path.parent.is_dir():
                    # A mistyped path is not made: the file is created, never its directory.
                    raise NoDatabase(f"database {path}: directory {path.parent} does not exist "
                                     "(create it, or correct database.url)")
                ensure_wal(path)
                # No busy wait at all: if another process holds the write lock, `write` goes
                # the usual way instead of blocking the loop.
                self._inline = create_engine(parsed.set(drivername="sqlite+pysqlite"), echo=echo,
                                             connect_args={"check_same_thread": False})
                install_sqlite_hooks(self._inline, busy_timeout_ms=0)
                self.checkpointer = Checkpointer(path, self._writer)
            self.engine: AsyncEngine = create_async_engine(
                self.url, echo=echo, async_creator=loop_connector(parsed.database or ":memory:")
            )
            install_sqlite_hooks(self.engine.sync_engine)
        else:
            # Server-side TCP keepalives: a replica whose host vanished without closing its
            # connections (power, network) would otherwise keep its advisory locks (a PR's
            # turn, the leadership) until the kernel's default keepalive gives up, two hours.
            self.engine = create_async_engine(self.url, echo=echo, pool_size=pool_size, max_overflow=pool_size,
                                              connect_args={"server_settings": PG_KEEPALIVES})
        install_read_only_guard(self.engine)
        self.sessions = async_sessionmaker(self.engine, class_=AsyncSession, expire_on_commit=False)
        # SQLite has one writer per file. Left to SQLite, a process's writers queue in its busy
        # handler, which sleeps and polls (1, 2, 5, … up to 100 ms between looks), so under load
        # most of a write's time was sleeping past the moment the lock came free. This process's
        # write sessions queue on an asyncio lock instead (first come, first served, woken at
        # once); SQLite's busy wait is then only between processes. One lock per event loop.
        self._writers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] | None = (
            weakref.WeakKeyDictionary() if self.backend == "sqlite" else None)

    @property
    def is_postgres(self) -> bool:
        return self.backend == "postgresql"

    @property
    def where(self) -> str:
        """The database as a message names it: its file, or its URL without the password."""
        return str(self.sqlite_file) if self.sqlite_file else make_url(self.url).render_as_string(hide_password=True)

    @asynccontextmanager
    async def session(self) -> AsyncIterator[AsyncSession]:
        """A session whose work commits on success and rolls back on error.

        On SQLite it is a write transaction (`BEGIN IMMEDIATE`), taken in turn with this
        process's other write sessions. Do not open one while holding another in the same task.
        """
        async with self._writer(), self.sessions() as s, s.begin():
            yield s
        if self.checkpointer is not None:  # committed
            self.checkpointer.committed()

    @asynccontextmanager
    async def _writer(self) -> AsyncIterator[None]:
        if self._writers is None:
            yield
            return
        loop = asyncio.get_running_loop()
        lock = self._writers.get(loop)
        if lock is None:
            lock = self._writers[loop] = asyncio.Lock()
        try:
            async with asyncio.timeout(WRITER_PATIENCE_SECONDS):
                await lock.acquire()
        except TimeoutError:
            raise sqlite3.OperationalError(
                f"database is locked: waited {WRITER_PATIENCE_SECONDS:g} s for this process's other writers"
            ) from None
        try:
            yield
        finally:
            lock.release()

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

    @asynccontextmanager
    async def exclusive(self, name: str) -> AsyncIterator[bool]:
        """Whether this process alone may act on `name` (a PR's step) for the block's length.

        On PostgreSQL a transaction-level advisory lock, tried and never waited for, held on a
        connection of its own until the block ends; a process that dies lets go with its
        connection. Several replicas on one database each ask before a PR's step, and the one
        told False puts its job off. A SQLite file serves one process (`serve` refuses a
        second), so there it is always True.
        """
        if not self.is_postgres:
            yield True
            return
        async with self.engine.connect() as conn:
            got = (await conn.execute(text("SELECT pg_try_advisory_xact_lock(:ns, hashtext(:name))"),
                                      {"ns": _PG_EXCLUSIVE_NAMESPACE, "name": name})).scalar()
            try:
                yield bool(got)
            finally:
                try:
                    await conn.rollback()  # ends the transaction, and so the lock
                except Exception:
                    # The connection broke (and its lock went with it): the block's own work
                    # is done, so it is not failed for this; the connection is not reused.
                    with contextlib.suppress(Exception):
                        await conn.invalidate()

    async def write(self, fn: Callable[..., T], *args: Any, plain: Callable[..., T] | None = None) -> T:
        """Run `fn(session, *args)`, plain synchronous code, in one write transaction.

        For a short, hot write (the webhook intake's batches). On a SQLite file it runs on the
        event loop's thread, on a plain sqlite3 connection, when the write lock is free at once:
        an async session passes each statement to aiosqlite's thread and back, and on a busy
        loop every such hop waits for the loop's turn, so a three-statement transaction took
        ~16 ms of which well under 1 ms was SQLite's. If another process holds the lock, or on
        PostgreSQL, it runs through an async session (`AsyncSession.run_sync`) like any write.
        `fn` is run at most once: the inline attempt gives way only before its transaction began.

        With `plain`, the inline attempt runs `plain(connection, *args)` instead, on the plain
        sqlite3 connection (`BEGIN IMMEDIATE` and `COMMIT` sent by hand): the same write without
        SQLAlchemy's execution path, which was nearly all of the intake's batch. `fn` remains
        the write everywhere else (PostgreSQL, or another process holding the lock).
        """
        if self._inline is not None:
            async with self._writer():
                attempt = (self._write_plain(plain, args) if plain is not None
                           else self._write_inline(fn, args))
            if attempt[0]:
                if self.checkpointer is not None:
                    self.checkpointer.committed()
                return attempt[1]
        async with self.session() as s:
            return await s.run_sync(fn, *args)

    def _write_inline(self, fn: Callable[..., T], args: tuple[Any, ...]) -> _Attempt[T]:
        assert self._inline is not None
        with self._inline.connect() as conn:
            try:
                conn.begin()  # BEGIN IMMEDIATE (the begin hook), refused at once if locked
            except OperationalError as e:
                if "locked" in str(e) or "busy" in str(e):
                    return False, None
                raise
            with Session(bind=conn) as session:  # joins the transaction begun above
                try:
                    result = fn(session, *args)
                    session.flush()
                    conn.commit()
                except BaseException:
                    conn.rollback()
                    raise
        return True, result

    def _write_plain(self, fn: Callable[..., T], args: tuple[Any, ...]) -> _Attempt[T]:
        assert self._inline is not None
        if self._plain is None:
            # The pool's, set up by its hooks as any other, and kept: taking it from the pool
            # and giving it back cost about as much as the BEGIN and COMMIT of a batch.
            self._plain = self._inline.raw_connection()
        # SQLAlchemy types a pooled connection's driver connection as Any: pysqlite's is this.
        conn = cast(sqlite3.Connection, self._plain.driver_connection)
        try:
            conn.execute("BEGIN IMMEDIATE")  # busy_timeout 0 here: refused at once if locked
        except sqlite3.OperationalError as e:
            if "locked" in str(e) or "busy" in str(e):  # another process writes: wait off the loop
                return False, None
            self._drop_plain()
            raise
        try:
            result = fn(conn, *args)
            conn.execute("COMMIT")
        except BaseException:
            try:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            except BaseException:
                self._drop_plain()  # in a state no one knows: the next write opens another
                raise
            raise
        return True, result

    def _drop_plain(self) -> None:
        plain, self._plain = self._plain, None
        if plain is not None:
            plain.invalidate()

    async def dispose(self) -> None:
        await self.engine.dispose()
        if self._plain is not None:
            self._plain.close()  # back to the pool, which closes it below
            self._plain = None
        if self._inline is not None:
            self._inline.dispose()
        if self.checkpointer is not None:
            await self.checkpointer.close()
