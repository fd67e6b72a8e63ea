"""The intake's batch on a SQLite file, written through plain sqlite3 (`deliveries._record_sqlite`,
`jobs.queue_wakes_sqlite`), leaves exactly the rows the SQLAlchemy writer (`deliveries._record`)
leaves, and answers the same: the same batches, on the same clock, into two copies of one
database, are compared row by row. When another process holds the write lock, the batch waits
and is written by the SQLAlchemy writer instead."""

from __future__ import annotations

import asyncio
import random
import shutil
import sqlite3
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy.engine import make_url

from storage import deliveries, jobs
from storage.database import Database
from storage.deliveries import Delivery
from storage.statuses import SameWork

PRS = [f"acme/w#{n}" for n in range(1, 6)]


def _wake(rng: random.Random, delivery_id: str) -> dict:
    kind = rng.choice(["sync", "sync", "sync", "command", "enroll", "sync_ref"])
    pr = rng.choice(PRS)
    if kind == "sync":
        return {"kind": "sync", "key": f"sync:{pr}:{delivery_id}", "pr_key": pr, "payload": {},
                "delay_seconds": rng.choice([0.0, 0.2, 5.0]), "same_as": SameWork.PR}
    if kind == "sync_ref":
        # A few refs, so a ref's sync_refs coalesce and are brought forward as a PR's syncs are.
        ref = rng.choice([{"sha": "a" * 40, "branch": None}, {"sha": "b" * 40, "branch": None},
                          {"sha": None, "branch": "main"}])
        return {"kind": "sync_ref", "key": f"sync_ref:acme/w:{delivery_id}", "pr_key": None,
                "payload": {"repo": "acme/w", **ref}, "delay_seconds": rng.choice([0.0, 0.2, 5.0]),
                "same_as": SameWork.PAYLOAD}
    # A command's key is its comment: a redelivery, or another delivery of it, queues nothing new.
    return {"kind": kind, "key": f"{kind}:{rng.randint(1, 8)}", "pr_key": pr,
            "payload": {"comment_id": 7, "kind": "issue"} if kind == "command" else {}, "delay_seconds": 0.0}


def _batches(seed: int) -> list[list[Delivery]]:
    rng = random.Random(seed)
    ids = [f"d-{seed}-{i}" for i in range(40)]
    batches = []
    for _ in range(12):
        batch = []
        for _ in range(rng.randint(1, 8)):
            delivery_id = rng.choice(ids)  # a delivery again, in the batch or across batches
            wakes = tuple(_wake(rng, delivery_id) for _ in range(rng.randint(0, 3)))
            batch.append(Delivery(delivery_id, "pull_request", rng.choice(["opened", None]),
                                  "queued" if wakes else "ignored", None, wakes))
        batches.append(batch)
    return batches


def _rows(path) -> dict[str, list[tuple]]:
    with sqlite3.connect(path) as conn:
        return {table: conn.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()
                for table in ("webhook_deliveries", "jobs")}


@pytest.mark.parametrize("seed", range(6))
async def test_the_plain_writer_leaves_the_rows_sqlalchemys_leaves(sqlite_db_url, tmp_path, monkeypatch, seed):
    plain_path = make_url(sqlite_db_url).database
    core_path = tmp_path / "core.db"
    shutil.copyfile(plain_path, core_path)
    clock = [datetime(2026, 12, 2, 12, 0, tzinfo=UTC)]
    monkeypatch.setattr(deliveries, "utcnow", lambda: clock[0])
    monkeypatch.setattr(jobs, "utcnow", lambda: clock[0])
    plain, core = Database(sqlite_db_url), Database(f"sqlite:///{core_path}")
    wrote_plain = []
    record_sqlite = deliveries._record_sqlite
    monkeypatch.setattr(deliveries, "_record_sqlite",
                        lambda conn, batch: wrote_plain.append(1) or record_sqlite(conn, batch))
    try:
        for i, batch in enumerate(_batches(seed)):
            # Some batches come seconds apart: a sync queued earlier is then brought forward.
            clock[0] += timedelta(seconds=[0.1, 3.0][i % 2])
            got = await deliveries.record_many(plain, batch)
            want = await core.write(deliveries._record, batch)  # SQLAlchemy's writer, inline
            assert got == want, (seed, i)
        assert len(wrote_plain) == 12  # every batch went the plain way
        assert _rows(plain_path) == _rows(core_path)
        assert _rows(plain_path)["jobs"], "the batches queued jobs"
    finally:
        await plain.dispose()
        await core.dispose()


async def test_a_batch_waits_for_another_process_holding_the_lock_and_is_written(sqlite_db_url, monkeypatch):
    db = Database(sqlite_db_url)
    other = sqlite3.connect(make_url(sqlite_db_url).database, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another process's writer
        wake = {"kind": "sync", "key": "sync:acme/w#1:x", "pr_key": "acme/w#1", "payload": {}, "delay_seconds": 0.0,
                "same_as": SameWork.PR}
        refused = asyncio.Event()
        write_plain = db._write_plain

        def noting(fn, args):
            attempt = write_plain(fn, args)
            if not attempt[0]:
                refused.set()
            return attempt

        monkeypatch.setattr(db, "_write_plain", noting)
        pending = asyncio.create_task(deliveries.record_many(db, [Delivery("x", "pull_request", None, "queued",
                                                                           None, (wake,))]))
        # The write found the lock held, gave way, and waits (a write failing at once when
        # refused would be done by now).
        async with asyncio.timeout(30):
            await refused.wait()
        await asyncio.sleep(0.3)
        assert not pending.done()  # waiting, not failed
        other.execute("COMMIT")
        async with asyncio.timeout(10):
            recorded = await pending
        assert recorded.new == [True] and recorded.soonest is not None
        assert [j.key for j in await jobs.list_jobs(db)] == ["sync:acme/w#1:x"]
        assert await deliveries.seen(db, ["x"]) == {"x"}
    finally:
        other.close()
        await db.dispose()
