"""A SQLite file's WAL is checkpointed on a thread of its own (`storage.checkpoint.Checkpointer`),
not inside a commit on the event loop: the loop goes on while it runs, this process's writes wait
for it, and the WAL starts over after it instead of growing."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sqlite3
import threading
import uuid
from pathlib import Path

import structlog
from sqlalchemy import text

from storage import checkpoint, deliveries
from storage.checkpoint import (
    BACKSTOP_AUTOCHECKPOINT_PAGES,
    CHECKPOINT_COMMITS_BOUNDS,
    CHECKPOINT_PAGES,
    WAL_LOOK_COMMITS,
)
from storage.database import Database
from storage.deliveries import Delivery
from storage.statuses import SameWork

from ..helpers import until


def _batch(n: int = 4) -> list[Delivery]:
    ids = [str(uuid.uuid4()) for _ in range(n)]
    return [Delivery(i, "pull_request", "synchronize", "queued", None,
                     ({"kind": "sync", "key": f"sync:acme/w#1:{i}", "pr_key": "acme/w#1", "payload": {},
                       "delay_seconds": 0.2, "same_as": SameWork.PR},)) for i in ids]


async def _true(value: bool) -> bool:
    return value


def _rows_in_file_alone(db_path: Path, tmp_path: Path) -> int:
    """The deliveries in the database file itself, without its WAL: what checkpoints copied."""
    copy = tmp_path / "alone.db"
    shutil.copyfile(db_path, copy)
    with contextlib.closing(sqlite3.connect(copy)) as conn:
        return conn.execute("SELECT count(*) FROM webhook_deliveries").fetchone()[0]


async def test_the_processs_connections_leave_checkpoints_to_the_checkpointer(sqlite_db_url):
    db = Database(sqlite_db_url)
    try:
        async with db.session() as s:
            written = (await s.exec(text("PRAGMA wal_autocheckpoint"))).scalar()
        async with db.read_session() as s:
            read = (await s.exec(text("PRAGMA wal_autocheckpoint"))).scalar()
        inline = await db.write(lambda s: s.connection().exec_driver_sql("PRAGMA wal_autocheckpoint").scalar())
        assert (written, read, inline) == (BACKSTOP_AUTOCHECKPOINT_PAGES,) * 3
    finally:
        await db.dispose()


async def _commit(db: Database, commits: int, size: int = 4) -> None:
    for _ in range(commits):
        await deliveries.record_many(db, _batch(size))
        await asyncio.sleep(0)  # a server's loop turns between writes; the checkpoint runs then


async def _commit_until_checkpointed(db: Database, size: int) -> int:
    """Commits of `size` rows, a look at the WAL's size at a time, until the first checkpoint
    has run; the commits it took."""
    commits = 0
    while db.checkpointer.checkpoints == 0:
        assert commits < 100 * WAL_LOOK_COMMITS, "no checkpoint"
        await _commit(db, WAL_LOOK_COMMITS, size)
        commits += WAL_LOOK_COMMITS
        if db.checkpointer._running(asyncio.get_running_loop()):
            await until("the first checkpoint", lambda: _true(db.checkpointer.checkpoints == 1))
    return commits


async def test_the_wal_is_copied_into_the_file_and_starts_over(sqlite_db_url, tmp_path):
    db = Database(sqlite_db_url)
    path = Path(sqlite_db_url.removeprefix("sqlite:///"))
    wal = Path(f"{path}-wal")
    try:
        assert db.checkpointer is not None
        written = 4 * await _commit_until_checkpointed(db, 4)
        sizes = [wal.stat().st_size]
        for cycle in range(2, 6):
            due = db.checkpointer.due
            await _commit(db, due)
            written += due * 4
            await until(f"checkpoint {cycle}", lambda c=cycle: _true(db.checkpointer.checkpoints >= c))
            sizes.append(wal.stat().st_size)
        # Everything committed before the last checkpoint is in the file itself...
        assert _rows_in_file_alone(path, tmp_path) == written
        # ... and the WAL was written over from its start each cycle, not appended to: it keeps
        # the size of a cycle's pages (about the same each cycle once the count has adapted).
        assert max(sizes[2:]) <= 2 * sizes[1], sizes
    finally:
        await db.dispose()


async def test_the_commits_between_checkpoints_follow_the_pages_a_commit_writes(tmp_path, sqlite_template):
    """About `CHECKPOINT_PAGES` pages a checkpoint: the first once the WAL holds that many (a
    small database is never checkpointed), and commits of many rows are checkpointed after
    fewer of them than commits of one."""
    dues, firsts = {}, {}
    for size in (1, 16):
        path = tmp_path / f"{size}.db"
        shutil.copyfile(sqlite_template, path)
        db = Database(f"sqlite:///{path}")
        try:
            firsts[size] = await _commit_until_checkpointed(db, size)
            assert db.checkpointer.frames >= CHECKPOINT_PAGES
            dues[size] = db.checkpointer.due
        finally:
            await db.dispose()
    assert WAL_LOOK_COMMITS < firsts[16] < firsts[1], firsts
    low, high = CHECKPOINT_COMMITS_BOUNDS
    assert low <= dues[16] < dues[1] <= high, dues


async def test_while_a_checkpoint_runs_the_loop_goes_on_and_the_processs_writes_wait(sqlite_db_url, monkeypatch):
    monkeypatch.setattr(checkpoint, "CHECKPOINT_PAGES", 1)  # the first look at the WAL starts one
    db = Database(sqlite_db_url)
    started, release = threading.Event(), threading.Event()
    real = checkpoint.Checkpointer._checkpoint

    def held(self) -> None:
        started.set()
        release.wait(30)
        real(self)

    monkeypatch.setattr(checkpoint.Checkpointer, "_checkpoint", held)
    try:
        for _ in range(WAL_LOOK_COMMITS):
            await deliveries.record_many(db, _batch(1))
        await until("the checkpoint's start", lambda: _true(started.is_set()))
        # The loop runs: a read completes while the checkpoint holds its thread.
        assert await deliveries.count(db) == WAL_LOOK_COMMITS
        # A write waits for the checkpoint's end (committing alongside it would leave its pages
        # behind the checkpoint, and the WAL could not start over).
        write = asyncio.create_task(deliveries.record_many(db, _batch(1)))
        await asyncio.sleep(0.2)
        assert not write.done()
        release.set()
        recorded = await asyncio.wait_for(write, 30)
        assert recorded.new == [True]
        assert db.checkpointer.checkpoints == 1
    finally:
        release.set()
        await db.dispose()


async def test_a_failed_checkpoint_is_logged_and_the_next_one_runs(sqlite_db_url, monkeypatch):
    monkeypatch.setattr(checkpoint, "CHECKPOINT_PAGES", 1)  # each look at the WAL starts one
    db = Database(sqlite_db_url)
    real = checkpoint.Checkpointer._checkpoint
    calls = []

    def failing_once(self) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise sqlite3.OperationalError("disk I/O error")
        real(self)

    monkeypatch.setattr(checkpoint.Checkpointer, "_checkpoint", failing_once)
    try:
        with structlog.testing.capture_logs() as logs:
            await _commit(db, WAL_LOOK_COMMITS, 1)  # the first fails: `due` stays as it was
            await _commit(db, WAL_LOOK_COMMITS, 1)
            await until("a checkpoint after the failed one", lambda: _true(db.checkpointer.checkpoints == 1))
        assert len(calls) == 2
        assert [e["error"] for e in logs if e["event"] == "sqlite.checkpoint_failed"] == [
            "OperationalError: disk I/O error"]
        # The writes around the failure all landed.
        assert await deliveries.count(db) == 2 * WAL_LOOK_COMMITS
    finally:
        await db.dispose()
