"""The async engine and sessions for SQLite (default) and PostgreSQL."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import os
import sqlite3
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

import aiosqlite
import structlog
from sqlalchemy import ColumnElement, Table, bindparam, create_engine, event, text
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.engine.interfaces import DBAPICursor, ExecutionContext
from sqlalchemy.exc import ArgumentError, OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine
from sqlalchemy.orm import Mapped
from sqlalchemy.pool import ConnectionPoolEntry, PoolProxiedConnection
from sqlmodel import Session, select
from sqlmodel.ext.asyncio.session import AsyncSession

T = TypeVar("T")
V = TypeVar("V", str, int)  # a key column's values (`present`)

# What an inline write attempt gives: (True, the write's result), or (False, None) when it did
# not begin (another process held the write lock).
_Attempt = tuple[Literal[True], T] | tuple[Literal[False], None]

log = structlog.get_logger(__name__)

DEFAULT_URL = "sqlite+aiosqlite:///./convergebot.db"

# The execution option that marks a read session's connection (see `Database.read_session`).
READ_ONLY = "convergebot_read_only"

# How long a write session waits for this process's other SQLite writers before it gives up, as
# SQLite's own busy wait would (the lock below is that wait, for the writers of this process).
WRITER_PATIENCE_SECONDS = 30.0
# A SQLite file's WAL is checkpointed on a thread of its own (`_Checkpointer`) once this
# process's write transactions have written about this many pages to it (SQLite's own default
# threshold), instead of by SQLite inside whichever commit crosses it, on the event loop's thread.
CHECKPOINT_PAGES = 1000
# Until a checkpoint has measured the pages a commit writes, the WAL file's size is looked at
# every this many commits (a WAL frame is a page and its 24-byte header; SQLite's default page
# size, which this database keeps). Then the bounds of the commits a checkpoint waits for.
WAL_LOOK_COMMITS = 64
WAL_FRAME_BYTES = 4096 + 24
CHECKPOINT_COMMITS_BOUNDS = (16, 4096)
# SQLite's own automatic checkpoint stays on at this many pages (~40 MB of WAL with 4 KB pages),
# a bound for a WAL whose writers this process does not count (another process, a migration).
BACKSTOP_AUTOCHECKPOINT_PAGES = 10_000
# Values per `IN (...)` list: well under every backend's bound-parameter limit.
IN_BATCH = 500
# A dead peer is noticed after about 10 + 3 * 5 seconds of silence.
PG_KEEPALIVES = {"tcp_keepalives_idle": "10", "tcp_keepalives_interval": "5", "tcp_keepalives_count": "3"}
# The first key of `exclusive`'s two-key advisory locks ("conv"), apart from other users' locks.
_PG_EXCLUSIVE_NAMESPACE = 0x636F6E76


class ReadOnlyViolation(RuntimeError):
    """A statement other than a read was sent through a read session."""


class UnsupportedURL(ValueError):
    """`database.url` names no backend this project runs on, or does not parse."""


class NoDatabase(LookupError):
    """No database to read: the SQLite file is not there (opened with `create=False`), or, as the
    read-only commands say it, the schema is not."""


def normalize_url(url: str) -> str:
    """Accept the URLs people paste (`sqlite:///x.db`, `postgresql://…`) and pick the async driver."""
    try:
        u = make_url(url)
    except ArgumentError:
        raise UnsupportedURL(f"database.url: cannot parse {url!r} (e.g. sqlite:///convergebot.db)") from None
    if u.get_backend_name() == "sqlite":
        return u.set(drivername="sqlite+aiosqlite").render_as_string(hide_password=False)
    if u.get_backend_name() == "postgresql":
        return u.set(drivername="postgresql+asyncpg").render_as_string(hide_password=False)
    raise UnsupportedURL(f"database.url: unsupported backend {u.get_backend_name()!r} (use sqlite or postgresql)")


def connect_failure(e: BaseException) -> str:
    """Why a first connection failed, in one line: the driver's own message without the
    statement and the link SQLAlchemy appends."""
    cause = getattr(e, "orig", None) or e
    text_ = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
    if text_.startswith("<class '") and ">: " in text_:  # asyncpg through SQLAlchemy's adapter
        text_ = text_.split(">: ", 1)[1]
    return text_


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
        self.checkpointer: _Checkpointer | None = None
        if self.backend == "sqlite":
            if parsed.database and parsed.database != ":memory:":
                path = self.sqlite_file = Path(parsed.database).expanduser().resolve()
                if not create and not path.is_file():
                    raise NoDatabase(f"database {path} does not exist: create it with `convergebot migrate`")
                path.parent.mkdir(parents=True, exist_ok=True)
                _ensure_wal(path)
                # No busy wait at all: if another process holds the write lock, `write` goes
                # the usual way instead of blocking the loop.
                self._inline = create_engine(parsed.set(drivername="sqlite+pysqlite"), echo=echo,
                                             connect_args={"check_same_thread": False})
                _install_sqlite_hooks(self._inline, busy_timeout_ms=0)
                self.checkpointer = _Checkpointer(self, path)
            self.engine: AsyncEngine = create_async_engine(
                self.url, echo=echo, async_creator=_loop_connector(parsed.database or ":memory:")
            )
            _install_sqlite_hooks(self.engine.sync_engine)
        else:
            # Server-side TCP keepalives: a replica whose host vanished without closing its
            # connections (power, network) would otherwise keep its advisory locks (a PR's
            # turn, the leadership) until the kernel's default keepalive gives up, two hours.
            self.engine = create_async_engine(self.url, echo=echo, pool_size=pool_size, max_overflow=pool_size,
                                              connect_args={"server_settings": PG_KEEPALIVES})
        _install_read_only_guard(self.engine)
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


class _Checkpointer:
    """Checkpoints a SQLite file's WAL on a thread of its own, once this process's write
    transactions have written about `CHECKPOINT_PAGES` pages to it.

    Left to SQLite, the commit that takes the WAL past a thousand pages also copies them into
    the database file and syncs both to disk, on the thread that commits: here the event loop's,
    which then serves nothing else. On a real disk that was ~20 ms about every hundred batches
    of the webhook intake, half of all the time its transactions took (docs/architecture.md).
    Here the commit only counts. When a checkpoint is due, a task takes this process's writer
    turn (`Database._writer`) and runs it on this object's thread, where SQLite releases the GIL
    for the copy and the sync: the loop goes on serving meanwhile, and only this process's
    writes wait, as they would behind the inline checkpoint. With no commit during it, the
    checkpoint copies the whole WAL, so the next write starts it over from the beginning; one
    run alongside commits would leave their pages behind every time, and the WAL would only
    grow. SQLite's own automatic checkpoint stays on far above this
    (`BACKSTOP_AUTOCHECKPOINT_PAGES`), for writers this process does not count.

    A commit does not tell how many pages it wrote, but a checkpoint does (the WAL's frames),
    and each sets the count of commits the next waits for from the pages a commit wrote since
    the one before. The first runs once the WAL file has grown to the threshold's size (looked
    at every `WAL_LOOK_COMMITS` commits): a small database, a test's, is never checkpointed
    early, as SQLite would not have either.
    """

    def __init__(self, db: Database, path: Path) -> None:
        self.db = db
        self.path = path
        self.checkpoints = 0  # run, for tests and the benchmark
        self.frames = 0  # the WAL's frames at the last checkpoint
        self.due = WAL_LOOK_COMMITS  # commits before the next checkpoint (or look at the WAL)
        self._measured = False  # a checkpoint has counted the frames of known commits
        self._commits = 0
        self._task: asyncio.Task[None] | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None  # opened and used on the pool's thread

    def committed(self) -> None:
        """One more write transaction committed; start a checkpoint if one is due and none runs."""
        self._commits += 1
        loop = asyncio.get_running_loop()
        if self._commits < self.due or self._running(loop):
            return
        if not self._measured:
            if not self._wal_full():
                self.due = self._commits + WAL_LOOK_COMMITS
                return
            self.due = WAL_LOOK_COMMITS  # if this one measures nothing, look again as before
        commits, self._commits = self._commits, 0
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="sqlite-checkpoint")
        self._task = loop.create_task(self._run(self._pool, commits), name="sqlite-checkpoint")

    def _wal_full(self) -> bool:
        """The WAL file has room for `CHECKPOINT_PAGES` frames. Its size is what the WAL ever
        held (SQLite writes it over from the start after a checkpoint, and does not shrink it),
        so it only tells when nothing was checkpointed yet: one left by an earlier process
        starts a checkpoint at once, which measures."""
        try:
            size = os.stat(f"{self.path}-wal").st_size
        except FileNotFoundError:
            return False
        return size >= CHECKPOINT_PAGES * WAL_FRAME_BYTES

    def _running(self, loop: asyncio.AbstractEventLoop) -> bool:
        # A task of another loop (a Database used from one `asyncio.run` after another) will not
        # run again: it holds up nothing here.
        return self._task is not None and not self._task.done() and self._task.get_loop() is loop

    async def _run(self, pool: concurrent.futures.ThreadPoolExecutor, commits: int) -> None:
        try:
            async with self.db._writer():
                frames = await asyncio.get_running_loop().run_in_executor(pool, self._checkpoint)
            self.checkpoints += 1
        except Exception as e:  # the next one tries again; the backstop bounds the WAL meanwhile
            log.warning("sqlite.checkpoint_failed", error=f"{type(e).__name__}: {e}")
            return
        self.frames = frames
        if frames > 0:
            self._measured = True
            low, high = CHECKPOINT_COMMITS_BOUNDS
            self.due = max(low, min(high, round(CHECKPOINT_PAGES * commits / frames)))

    def _checkpoint(self) -> int:
        """The frames the WAL held; all of them are in the database file now, unless a reader
        (of another process) still used some."""
        if self._conn is None:
            self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        # PASSIVE: no busy wait (another process's writer is not waited for: the next one tries).
        _busy, frames, _copied = self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        return max(int(frames), 0)  # -1: not in WAL mode

    async def close(self) -> None:
        """Wait for a checkpoint running, then let the thread and its connection go."""
        if self._task is not None and self._running(asyncio.get_running_loop()):
            await asyncio.wait([self._task])  # it logs its own failure
        self._task = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None


# An UPDATE built once and bound at each run: `fenced_update`, a job's end, a round's update.
# Building a statement and its cache key anew cost more than running it on the hot paths.
Shape = tuple[tuple[str, ColumnElement[Any] | None], ...]


def on_postgres(session: AsyncSession) -> bool:
    """Whether the session's database is PostgreSQL (else SQLite)."""
    bind = session.bind
    assert bind is not None, "a Database's sessions are bound to its engine"
    return bind.dialect.name == "postgresql"


def split_values(values: Mapping[str, Any]) -> tuple[Shape, dict[str, Any]]:
    """A write's values as its shape and its parameters. The shape names each column set, in
    order, with the SQL expression given for it or None; it keys the statement built once
    (`set_clause`). Every other value is a parameter, bound as `v_<column>`."""
    shape = tuple(sorted((k, v if isinstance(v, ColumnElement) else None) for k, v in values.items()))
    return shape, {f"v_{k}": v for k, v in values.items() if not isinstance(v, ColumnElement)}


def set_clause(table: Table, shape: Iterable[tuple[str, ColumnElement[Any] | None]]) -> dict[str, Any]:
    """The SET of an UPDATE of `table` for one shape (`split_values`): each column's value bound
    as `v_<column>` with the column's type, or the SQL expression the shape carries."""
    columns = table.c
    return {name: expr if expr is not None else bindparam(f"v_{name}", type_=columns[name].type)
            for name, expr in shape}


@functools.cache
def sqlite_stamps() -> tuple[Callable[[datetime], str], Callable[[str], datetime]]:
    """How SQLAlchemy writes and reads a time column (`UTCDateTime`) on SQLite: what plain
    sqlite3 statements use, so they store and read exactly what the Core ones do."""
    from sqlalchemy.dialects.sqlite import pysqlite

    from .models import UTCDateTime

    dialect = pysqlite.dialect()
    kind = UTCDateTime().dialect_impl(dialect)
    # SQLAlchemy types both as optional (a type may need no processing); a TypeDecorator with
    # process_bind_param and process_result_value always has both.
    return (cast(Callable[[datetime], str], kind.bind_processor(dialect)),
            cast(Callable[[str], datetime], kind.result_processor(dialect, None)))


@functools.lru_cache(maxsize=128)
def plain_insert(table: str, columns: tuple[str, ...], rows: int, key: str, returning: str) -> str:
    """A plain sqlite3 INSERT of `rows` rows of `columns`, skipping a row whose `key` exists and
    returning `returning` of each row inserted (what `on_conflict_do_nothing().returning()`
    sends through SQLAlchemy)."""
    marks = "(" + ", ".join("?" * len(columns)) + ")"
    return (f"INSERT INTO {table} ({', '.join(columns)}) VALUES {', '.join([marks] * rows)} "
            f"ON CONFLICT ({key}) DO NOTHING RETURNING {returning}")


async def present(db: Database, column: Mapped[V], values: Iterable[V]) -> set[V]:
    """Which of `values` some row holds in `column` (a model's column attribute, `col(Model.x)`),
    asked in batches of `IN_BATCH`, in one read session."""
    wanted, found = sorted(set(values)), set[V]()
    async with db.read_session() as s:
        for start in range(0, len(wanted), IN_BATCH):
            found.update((await s.exec(select(column).where(column.in_(wanted[start:start + IN_BATCH])))).all())
    return found


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


class _LoopConnection(aiosqlite.Connection):
    """aiosqlite's connection, with the statements that need not wait run on the event loop's thread.

    aiosqlite runs every statement on a thread of its own and hands the result back through the
    loop: two thread hand-offs per statement, fetch and cursor, which measured as the largest
    share of the bot's CPU (a GIL hand-over at every hand-off). Reads never wait in WAL mode,
    and neither does anything inside a write transaction once it holds the lock, so they run
    inline, and so do a transaction's end and its `BEGIN IMMEDIATE` when the write lock is free
    (this process's writers take turns on an asyncio lock first, `Database.session`). Only a
    `BEGIN IMMEDIATE` that finds another process holding the write lock goes to the thread, to
    wait there; so do opening and closing.

    A commit does not checkpoint the WAL here: that runs on a thread of its own (`_Checkpointer`),
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


def _loop_connector(database: str) -> Callable[[], Awaitable[_LoopConnection]]:
    async def connect() -> _LoopConnection:
        def connector() -> sqlite3.Connection:
            # Opened on aiosqlite's thread, then used from two threads (never at once): the
            # loop's and aiosqlite's.
            return sqlite3.connect(database, timeout=30, check_same_thread=False)

        # aiosqlite types what awaiting a connection gives as its base class: it is the
        # connection awaited.
        return cast(_LoopConnection, await _LoopConnection(connector, iter_chunk_size=64))

    return connect


def _install_sqlite_hooks(engine: Engine, busy_timeout_ms: int = 5000) -> None:
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
        # The WAL is the database's `_Checkpointer`'s (a file's; in memory there is no WAL):
        # SQLite's own checkpoint, run inside a commit, only as a backstop.
        cur.execute(f"PRAGMA wal_autocheckpoint={BACKSTOP_AUTOCHECKPOINT_PAGES}")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        if conn.get_execution_options().get(READ_ONLY):
            # A read session: deferred, so it takes no write lock (it only reads; the guard
            # below refuses anything else).
            loop_conn = getattr(conn.connection.dbapi_connection, "_connection", None)
            if isinstance(loop_conn, _LoopConnection):
                loop_conn.begin_read()
            else:
                conn.exec_driver_sql("BEGIN")
            return
        # IMMEDIATE takes the write lock up front: a transaction that reads and then writes can
        # otherwise fail with SQLITE_BUSY on upgrade, which busy_timeout does not retry.
        conn.exec_driver_sql("BEGIN IMMEDIATE")


_READS = ("select", "with", "show", "pragma", "explain", "begin", "savepoint", "release", "rollback", "commit")


def _install_read_only_guard(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "before_cursor_execute")
    def _refuse_writes(conn: Connection, _cursor: DBAPICursor, statement: str, _params: Any,
                       _context: ExecutionContext | None, _executemany: bool) -> None:
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
