"""Which replica runs the once-per-deployment duties: the poller, the repository scan, the
webhook redelivery. See docs/architecture.md, "Replicas"."""

from __future__ import annotations

import asyncio

import structlog
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from storage.database import Database
from storage.urls import connect_failure

log = structlog.get_logger(__name__)

# A fixed 64-bit key ("convlead") for the session-level advisory lock the leader holds.
LEADER_LOCK = 0x636F6E766C656164


class Leadership:
    """`await holds()` before each periodic duty; False means another replica runs it.

    On PostgreSQL the leader is the process holding a session-level advisory lock on a
    connection it keeps for that alone. Every replica asks on each duty's tick: the leader
    checks its connection still answers, the others try the lock. A leader that dies (even by
    SIGKILL) loses its connection and so the lock, and the next replica to tick takes over. A
    SQLite file serves one process (`serve` refuses a second), which always leads.
    """

    def __init__(self, db: Database) -> None:
        self.db = db
        self._conn: AsyncConnection | None = None
        self._asking = asyncio.Lock()
        self._closed = False  # released at shutdown: never take the lock again

    @property
    def leading(self) -> bool:
        """What the last answer was (no database round trip)."""
        return not self.db.is_postgres or self._conn is not None

    async def holds(self) -> bool:
        if not self.db.is_postgres:
            return True
        async with self._asking:
            if self._closed:
                return False
            if self._conn is not None:
                try:
                    await self._conn.execute(text("SELECT 1"))
                    await self._conn.commit()
                    return True
                except Exception as e:
                    log.warning("leadership.lost", error=f"{type(e).__name__}: {e}")
                    await self._drop()
            conn = await self.db.engine.connect()
            try:
                got = bool((await conn.execute(text("SELECT pg_try_advisory_lock(:k)"),
                                               {"k": LEADER_LOCK})).scalar())
                await conn.commit()
            except BaseException:
                # The lock may be held already: closed for good, never handed to the pool.
                self._conn = conn
                await self._drop()
                raise
            if not got:
                await conn.close()
                return False
            self._conn = conn
            log.info("leadership.taken")
            return True

    async def release(self) -> None:
        """Let another replica lead at once (at shutdown) instead of when this one is gone."""
        async with self._asking:
            self._closed = True
            if self._conn is not None:
                try:
                    await self._conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": LEADER_LOCK})
                    await self._conn.commit()
                except Exception as e:
                    # Its connection is gone (the database went away), and the lock with it.
                    log.warning("leadership.release_failed", error=f"{type(e).__name__}: {connect_failure(e)}")
                await self._drop()
                log.info("leadership.released")

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        # Closed for good, not handed back to the pool: a pooled connection that still held the
        # lock would keep it for whoever borrowed it next.
        try:
            await conn.invalidate()
        except Exception:
            log.debug("leadership.invalidate_failed", exc_info=True)
