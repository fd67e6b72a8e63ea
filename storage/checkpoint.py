"""The checkpoint of a SQLite file's WAL, on a thread of its own instead of inside whichever
commit crosses SQLite's threshold on the event loop's thread: when one is due, how it takes this
process's writer turn, and how the commits it waits for are measured."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import sqlite3
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import structlog

log = structlog.get_logger(__name__)

# A SQLite file's WAL is checkpointed on a thread of its own (`Checkpointer`) once this
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


class Checkpointer:
    """Checkpoints a SQLite file's WAL on a thread of its own, once this process's write
    transactions have written about `CHECKPOINT_PAGES` pages to it.

    Left to SQLite, the commit that takes the WAL past a thousand pages also copies them into
    the database file and syncs both to disk, on the thread that commits: here the event loop's,
    which then serves nothing else. On a real disk that was ~20 ms about every hundred batches
    of the webhook intake, half of all the time its transactions took (docs/architecture.md).
    Here the commit only counts. When a checkpoint is due, a task takes this process's writer
    turn (`writer_turn`: `Database._writer`) and runs it on this object's thread, where SQLite releases the GIL
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

    def __init__(self, path: Path, writer_turn: Callable[[], AbstractAsyncContextManager[None]]) -> None:
        self.path = path
        self.writer_turn = writer_turn
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
            async with self.writer_turn():
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
