"""`storage/backup.py`: a SQLite database copied while writers commit to it is one commit's state,
checked, and made whole or not at all; what it cannot copy it refuses in one line."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import update
from sqlmodel import col

from bot.engine import outbox
from storage import backup, jobs, prs, rounds
from storage.backup import BackupRefused, backup_sqlite, sqlite_file
from storage.database import Database
from storage.models import Job, utcnow

from ..helpers import enroll, finish

SQLITE = pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
UPDATES = outbox.effect_key_prefix("check_run")  # every check-run update's job key starts so


def _count(path: Path, table: str) -> int:
    with sqlite3.connect(path) as conn:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


@SQLITE
async def test_a_backup_taken_while_prs_are_enrolled_is_one_commit_s_state(db_url, tmp_path):
    source = sqlite_file(db_url)
    db = Database(db_url)
    try:
        for n in range(1, 51):
            await enroll(db, f"acme/app#{n}")
        before = len(await prs.list_all(db))
        # The WAL holds what was just committed: a plain copy of the file alone would miss it.
        assert Path(f"{source}-wal").stat().st_size > 0

        stop = asyncio.Event()

        async def keep_enrolling() -> int:
            n = 1000
            while not stop.is_set():
                n += 1
                await enroll(db, f"acme/app#{n}")
            return n - 1000

        writer = asyncio.create_task(keep_enrolling())
        await asyncio.sleep(0)  # the writer is under way when the copy starts
        seen: list[tuple[int, int]] = []
        made = await asyncio.to_thread(backup_sqlite, source, tmp_path / "copy.db",
                                       progress=lambda done, total: seen.append((done, total)))
        stop.set()
        written = await writer
        after = len(await prs.list_all(db))
    finally:
        await db.dispose()

    assert seen and seen[-1][0] == seen[-1][1]  # progress reached its end
    copied = _count(made.path, "pull_requests")
    assert made.pull_requests == copied and before <= copied <= after == before + written
    # One commit's state: every PR copied has the run it was enrolled with (a first submit
    # writes both in one transaction), and the copy passes SQLite's own check.
    with sqlite3.connect(made.path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        orphans = conn.execute("SELECT count(*) FROM pull_requests p WHERE NOT EXISTS "
                               "(SELECT 1 FROM runs r WHERE r.process_key = p.process_key)").fetchone()[0]
        assert orphans == 0
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert not list(tmp_path.glob(".copy.db.partial-*"))

    # The copy is a database the bot opens as it is.
    restored = Database(f"sqlite:///{made.path}")
    try:
        assert len(await prs.list_all(restored)) == copied
    finally:
        await restored.dispose()


@SQLITE
async def test_a_backup_refuses_in_one_line_what_it_cannot_make(db_url, tmp_path):
    source = sqlite_file(db_url)
    existing = tmp_path / "there.db"
    existing.write_text("keep me")
    for dest, says in ((existing, "exists"), (tmp_path / "no" / "dir.db", "no directory")):
        with pytest.raises(BackupRefused, match=says) as e:
            backup_sqlite(source, dest)
        assert "\n" not in str(e.value)
    assert existing.read_text() == "keep me"
    with pytest.raises(BackupRefused, match="no database"):
        backup_sqlite(tmp_path / "missing.db", tmp_path / "out.db")
    assert not (tmp_path / "missing.db").exists()  # never made by looking
    with pytest.raises(BackupRefused, match="pg_dump"):
        sqlite_file("postgresql://u:secret@db/convergebot")
    with pytest.raises(BackupRefused, match="no SQLite file"):
        sqlite_file("sqlite:///:memory:")


async def _start_round(db: Database, key: str, round_no: int) -> None:
    pr = (await prs.get(db, key)).pr
    async with db.session() as s:
        await rounds.start(s, pr.pr_key, pr.process_key, round_no, "a" * 40)
    assert await prs.fenced_update(db, pr.pr_key, pr.process_key, {"current_round": round_no})


@SQLITE
async def test_a_restored_copy_is_known_as_one_until_the_runs_active_at_the_restore_move_on(db_url, tmp_path):
    db = Database(db_url)
    try:
        for key in ("acme/app#1", "acme/app#2"):
            await enroll(db, key)
            await _start_round(db, key, 1)
        assert await backup.restored(db) is None  # the live database is no backup
        made = backup_sqlite(sqlite_file(db_url), tmp_path / "copy.db")
    finally:
        await db.dispose()

    copy = Database(f"sqlite:///{made.path}")
    try:
        first = await backup.restored(copy)
        assert first is not None and first.taken_at <= first.restored_at
        assert await backup.restored(copy) == first  # the first start on it is what counts
        # Both runs are in a round begun before the restore.
        assert not await backup.restore_settled(copy, first, check_run_jobs=UPDATES)
        # One ends; the other starts a round after the restore: nothing is behind it any more.
        await finish(copy, "acme/app#1", "merged")
        assert not await backup.restore_settled(copy, first, check_run_jobs=UPDATES)
        await _start_round(copy, "acme/app#2", 2)
        assert await backup.restore_settled(copy, first, check_run_jobs=UPDATES)
        assert await backup.restored(copy) is None  # the mark is gone
    finally:
        await copy.dispose()


async def _restored_in_a_round(db: Database, key: str, head: str) -> tuple[backup.Restored, str]:
    """A database marked restored whose run on `key` is in a round begun since, on `head`."""
    await backup.mark_restored(db, utcnow() - timedelta(minutes=5))
    since = await backup.restored(db)
    assert since is not None
    pk = await enroll(db, key)
    await _start_round(db, key, 1)
    assert await prs.fenced_update(db, (await prs.get(db, key)).pr.pr_key, pk, {"head_sha": head})
    return since, pk


async def test_a_restore_settles_only_once_every_active_pr_s_check_run_names_its_head(db):
    # The restored row's mark names the head the backup knew a run on: a later head a forgotten
    # process made a run on would be taken for one without, and get a second.
    since, pk = await _restored_in_a_round(db, "acme/app#7", "b" * 40)
    key = (await prs.get(db, "acme/app#7")).pr.pr_key
    assert await prs.note_check_run(db, key, pk, {"check_run_head": "a" * 40, "check_run_id": 11})
    assert not await backup.restore_settled(db, since, check_run_jobs=UPDATES)
    assert await prs.note_check_run(db, key, pk, {"check_run_head": "b" * 40, "check_run_id": 12})
    assert await backup.restore_settled(db, since, check_run_jobs=UPDATES)
    assert await backup.restored(db) is None


async def test_a_restore_waits_for_the_check_run_update_of_a_pr_merged_since(db):
    # Merged before its held update wrote the run: no longer active, its last update still due.
    since, pk = await _restored_in_a_round(db, "acme/app#9", "b" * 40)
    key = (await prs.get(db, "acme/app#9")).pr.pr_key
    await finish(db, "acme/app#9", "merged")
    async with db.session() as s:
        await outbox.check_run(s, key, 5.0)
    assert not await backup.restore_settled(db, since, check_run_jobs=UPDATES)
    [due] = [j for j in await jobs.list_jobs(db) if j.key.startswith(UPDATES)]
    async with db.session() as s:  # the update done: it looked (restored) and named the head
        await s.exec(update(Job).where(col(Job.id) == due.id).values(status=jobs.JobStatus.DONE))
    assert await prs.note_check_run(db, key, pk, {"check_run_head": "b" * 40, "check_run_id": 12})
    assert await backup.restore_settled(db, since, check_run_jobs=UPDATES)


async def test_a_restore_does_not_wait_on_a_check_run_github_refused(db):
    # GitHub refuses a check run to a token that is no App's: the update gives up, the row's mark
    # never names the head, and waiting for it would leave the bot looking before every write.
    since, _ = await _restored_in_a_round(db, "acme/app#10", "b" * 40)
    key = (await prs.get(db, "acme/app#10")).pr.pr_key
    async with db.session() as s:
        await outbox.check_run(s, key, 5.0)
    assert not await backup.restore_settled(db, since, check_run_jobs=UPDATES)
    [due] = [j for j in await jobs.list_jobs(db) if j.key.startswith(UPDATES)]
    # Given up before the restore (the backup's, of some earlier head): says nothing of this one.
    async with db.session() as s:
        await s.exec(update(Job).where(col(Job.id) == due.id).values(
            status=jobs.JobStatus.FAILED, finished_at=since.restored_at - timedelta(minutes=1)))
    assert not await backup.restore_settled(db, since, check_run_jobs=UPDATES)
    async with db.session() as s:
        await s.exec(update(Job).where(col(Job.id) == due.id).values(finished_at=utcnow()))
    assert await backup.restore_settled(db, since, check_run_jobs=UPDATES)


async def test_a_dry_run_s_restore_settles_without_check_runs(db):
    since, _ = await _restored_in_a_round(db, "acme/app#8", "b" * 40)
    assert not await backup.restore_settled(db, since, check_run_jobs=UPDATES)
    assert await backup.restore_settled(db, since, check_run_jobs=None)


def _job(created_at, attempts: int = 1) -> Job:
    return Job(kind="effect", key="k", attempts=attempts, created_at=created_at, run_at=created_at)


def test_a_job_is_a_first_try_only_if_this_process_decided_it_on_a_database_whose_memory_holds():
    now = utcnow()
    assert outbox.first_try(_job(now))
    assert not outbox.first_try(_job(now, attempts=2))
    # Decided before this process began: another process may have tried it, its record lost.
    assert not outbox.first_try(_job(outbox.MEMORY.since - timedelta(seconds=1)))
    # On a restored backup nothing skips its look, however fresh.
    outbox.MEMORY.restore = backup.Restored(now, now)
    try:
        assert not outbox.first_try(_job(now))
    finally:
        outbox.MEMORY.restore = None


async def test_a_start_on_a_database_that_is_no_restore_only_reads(db, monkeypatch):
    # Every start asks whether the database is a restored backup: on one that is not (nearly
    # every start) the question takes no write transaction, which would wait behind a running
    # replica's writes on SQLite.
    def no_writes():
        raise AssertionError("a write transaction was opened")

    monkeypatch.setattr(db, "session", no_writes)
    assert await backup.restored(db) is None


async def test_a_database_restored_by_other_means_is_marked_with_restored(db_url):
    # PostgreSQL's dumps carry no mark: `convergebot restored --taken-at` puts it there, and the
    # bot then distrusts its memory as on a copy `convergebot backup` made.
    from .test_cli import cli_env
    from .test_cli_errors import convergebot, one_line

    env = cli_env(db_url)
    code, out, err = await convergebot("restored", "--taken-at", "2026-12-01T10:00:00Z", env=env)
    assert code == 0 and "marked as restored" in out, err
    db = Database(db_url)
    try:
        mark = await backup.restored(db)
        assert mark is not None and mark.taken_at.isoformat() == "2026-12-01T10:00:00+00:00"
    finally:
        await db.dispose()
    for bad, says in (("yesterday", "not an ISO 8601 time"), ("2026-12-01T10:00:00", "give the time's zone"),
                      ("2999-01-01T00:00:00Z", "a time in the future")):
        code, _, err = await convergebot("restored", "--taken-at", bad, env=env)
        assert code == 2 and says in one_line(err), err
