"""A consistent copy of a SQLite database while the bot serves it (`convergebot backup PATH`).

SQLite's online backup API copies the database page by page under its own read transaction, so
the copy is the database as one commit left it, WAL and all (a plain `cp` of a serving file can
miss what is still in the WAL). Written beside its destination under a temporary name, checked,
then renamed: a backup cut short leaves no file that looks whole. PostgreSQL has `pg_dump` for
this (docs/operations.md, "Backups").

The copy says it is one (the `database:backup` cursor: when it was taken). A bot started on it
knows that GitHub may be ahead of everything the database remembers (a review asked, a reply
posted, a check run made after the backup) and looks before every write, however sure its
memory, until every run active at the restore has moved past it (`restore_settled`).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlalchemy import and_, delete, func, or_
from sqlalchemy.engine import make_url
from sqlmodel import col, select
from sqlmodel.sql.expression import SelectOfScalar

from .database import Database
from .jobs import JobStatus
from .models import Cursor, Job, PullRequest, Round, utcnow
from .statuses import ACTIVE

MARK = "database:backup"  # the cursor a backup's copy carries
PAGES_PER_STEP = 4096  # 16 MB of 4 KB pages: the writers wait at most one step's copy


class BackupRefused(ValueError):
    """No backup made, for a reason given in one line."""


@dataclass(frozen=True)
class Backup:
    path: Path
    bytes: int
    tables: int
    pull_requests: int
    seconds: float


def sqlite_file(url: str) -> Path:
    """The file a `sqlite:///…` database URL names; BackupRefused for any other database."""
    u = make_url(url)
    if u.get_backend_name() == "postgresql":
        raise BackupRefused("backup: the database is PostgreSQL; take it with pg_dump "
                            "(docs/operations.md, \"Backups\")")
    if u.get_backend_name() != "sqlite" or not u.database or u.database == ":memory:":
        raise BackupRefused(f"backup: {u.get_backend_name()} database {u.database!r} is no SQLite file")
    return Path(u.database)


def backup_sqlite(source: Path, dest: Path, *, progress: Callable[[int, int], None] | None = None) -> Backup:
    """Copy the SQLite database at `source` to `dest` (a new file) while others read and write it.

    `progress(copied_pages, total_pages)` is called after each step."""
    if not source.is_file():
        raise BackupRefused(f"backup: no database at {source}")
    if dest.exists():
        raise BackupRefused(f"backup: {dest} exists; give a new file")
    if not dest.parent.is_dir():
        raise BackupRefused(f"backup: {dest.parent} is no directory")
    started = time.monotonic()
    partial = dest.with_name(f".{dest.name}.partial-{os.getpid()}")
    try:
        src = sqlite3.connect(f"file:{source}?mode=rw", uri=True)  # never made here: it is there
        try:
            out = sqlite3.connect(partial)
            try:
                src.backup(out, pages=PAGES_PER_STEP,
                           progress=(lambda _status, left, total: progress(total - left, total)) if progress else None)
                taken = utcnow().isoformat()
                out.execute("INSERT OR REPLACE INTO cursors (name, value, updated_at) VALUES (?, ?, ?)",
                            (MARK, json.dumps({"taken_at": taken, "restored_at": None}), taken))
                out.commit()
                out.execute("PRAGMA journal_mode=DELETE")  # one self-contained file, no WAL beside it
                if (check := out.execute("PRAGMA quick_check").fetchone()[0]) != "ok":
                    raise BackupRefused(f"backup: the copy fails SQLite's check: {check}")
                tables = out.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()[0]
                prs = (out.execute("SELECT count(*) FROM pull_requests").fetchone()[0]
                       if out.execute("SELECT 1 FROM sqlite_master WHERE name = 'pull_requests'").fetchone() else 0)
            finally:
                out.close()
        finally:
            src.close()
        os.replace(partial, dest)
    except sqlite3.Error as e:
        raise BackupRefused(f"backup: {source}: {e}") from None
    finally:
        partial.unlink(missing_ok=True)
    return Backup(dest, dest.stat().st_size, tables, prs, time.monotonic() - started)


@dataclass(frozen=True)
class Restored:
    taken_at: datetime
    restored_at: datetime


async def mark_restored(db: Database, taken_at: datetime) -> None:
    """Mark the database a restored backup taken at `taken_at`, as `backup_sqlite` marks its
    copies: for a PostgreSQL dump restored with `pg_restore`, which carries no mark. Earlier is
    the safe side: every review since `taken_at` may answer a request the database forgot."""
    now = utcnow()
    async with db.session() as s:
        mark = await s.get(Cursor, MARK)
        value = json.dumps({"taken_at": taken_at.isoformat(), "restored_at": None})
        if mark is None:
            s.add(Cursor(name=MARK, value=value, updated_at=now))
        else:
            mark.value, mark.updated_at = value, now
            s.add(mark)


async def restored(db: Database) -> Restored | None:
    """Whether this database is a restored backup still being caught up with; the first call on
    it notes when the bot first started on it (`restored_at`)."""
    async with db.read_session() as r:  # every start asks: a read, the write lock only on a restore
        found = await r.get(Cursor, MARK)
    if found is None:
        return None
    if (seen := json.loads(found.value)).get("restored_at") is not None:
        return Restored(datetime.fromisoformat(seen["taken_at"]), datetime.fromisoformat(seen["restored_at"]))
    async with db.session() as s:
        mark = await s.get(Cursor, MARK)
        if mark is None:
            return None
        value = json.loads(mark.value)
        if value.get("restored_at") is None:
            value["restored_at"] = utcnow().isoformat()
            mark.value = json.dumps(value)
            mark.updated_at = utcnow()
            s.add(mark)
    return Restored(datetime.fromisoformat(value["taken_at"]), datetime.fromisoformat(value["restored_at"]))


async def restore_settled(db: Database, since: Restored, *, check_run_jobs: str | None) -> bool:
    """Whether no active PR is still in a round begun before the restore (nor waiting to begin
    one), nor has a check run to write on a head its row does not name; then the mark goes, and
    the database's memory is to be trusted again. `check_run_jobs`: what the key of every
    check-run update job starts with (None: a dry run, which writes none).

    The check runs: the row's mark of the head it made a run on is what lets the effect create
    the next head's run without a look (bot/effects/check_run.py). Restored, the mark may name
    an older head than one a forgotten process made a run on; a round begun since the restore
    read the PR's head afresh, and once the run on that head is found or made, every later head
    is newer than the backup. A PR that has left the active statuses (merged since) still has
    its last update to write while one is queued."""
    behind = (select(func.count()).select_from(PullRequest)
              .where(col(PullRequest.status).in_(ACTIVE))
              .where(~select(Round.round_no).where(Round.process_key == PullRequest.process_key,
                                                   Round.round_no == PullRequest.current_round,
                                                   col(Round.started_at) >= since.restored_at).exists()))
    async with db.session() as s:
        if (await s.exec(behind)).one() > 0:
            return False
        if check_run_jobs is not None and (await s.exec(_unnamed(check_run_jobs, since))).one() > 0:
            return False
        await s.exec(delete(Cursor).where(col(Cursor.name) == MARK))
    return True


def _unnamed(check_run_jobs: str, since: Restored) -> SelectOfScalar[int]:
    """How many PRs have a check run still to write on a head their row's mark does not name: an
    update queued, or active with none given up since the restore (GitHub refuses a check run to
    a token that is no App's: waited for, the restore would never settle)."""
    of_the_pr = (Job.pr_key == PullRequest.pr_key, col(Job.key).startswith(check_run_jobs))
    update_due = select(Job.id).where(*of_the_pr, col(Job.status).in_((JobStatus.QUEUED, JobStatus.RUNNING))).exists()
    given_up = select(Job.id).where(*of_the_pr, col(Job.status).in_((JobStatus.FAILED, JobStatus.DROPPED)),
                                    col(Job.finished_at) >= since.restored_at).exists()
    return (select(func.count()).select_from(PullRequest)
            .where(col(PullRequest.head_sha).is_not(None))
            .where(col(PullRequest.check_run_head).is_distinct_from(PullRequest.head_sha))
            .where(or_(update_due, and_(col(PullRequest.status).in_(ACTIVE), ~given_up))))
