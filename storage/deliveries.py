"""The webhook_deliveries aggregate: each X-GitHub-Delivery is handled once."""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.dml import ReturningInsert
from sqlmodel import Session, col, select

from . import jobs
from .database import Database
from .models import WebhookDelivery, utcnow
from .statements import delete_old, plain_insert, present, sqlite_stamps


@dataclass(frozen=True)
class Delivery:
    """One delivery to record: what `record` and `record_many` take."""

    delivery_id: str
    event: str
    action: str | None
    outcome: str
    error: str | None = None
    wakes: Sequence[dict[str, Any]] = ()


@dataclass(frozen=True)
class Recorded:
    """What `record_many` did: per delivery, in order, whether it was new; and when the soonest
    job it queued (or brought forward) falls due, None if it queued nothing new."""

    new: list[bool]
    soonest: datetime | None


async def record(
    db: Database,
    delivery_id: str,
    event: str,
    action: str | None,
    outcome: str,
    error: str | None,
    wakes: Iterable[dict[str, Any]],
) -> bool:
    """Record a delivery and queue its jobs in one transaction; False if it was seen before.

    One transaction: a crash between the two would either lose the work (recorded, no job) or
    let a redelivery run it twice.
    """
    return (await record_many(db, [Delivery(delivery_id, event, action, outcome, error, tuple(wakes))])).new[0]


async def record_many(db: Database, batch: Sequence[Delivery]) -> Recorded:
    """Record a batch of deliveries and queue their jobs, all in one transaction (group commit).

    `Recorded.new` is, in order, True for each delivery recorded now and False for each seen
    before: recorded by an earlier transaction, or earlier in this very batch (the insert skips
    a row whose id an earlier row of the same statement took). Nothing of the batch is written
    if any of it fails: the caller answers every delivery in it with an error.
    """
    if not batch:
        return Recorded([], None)
    return await db.write(_record, batch, plain=_record_sqlite)


@functools.cache
def _insert(dialect_name: str) -> ReturningInsert[str]:
    """The batch's INSERT, built once per dialect (building it cost as much as running it).

    One statement for all the rows (an executemany SQLAlchemy sends as one multi-row INSERT):
    RETURNING names the rows inserted, so a delivery recorded before, by any process, is told
    apart without a statement of its own."""
    insert = postgresql.insert if dialect_name == "postgresql" else sqlite.insert
    table = WebhookDelivery.__table__
    return insert(table).on_conflict_do_nothing(index_elements=["delivery_id"]).returning(
        table.c.delivery_id
    )


def _record(s: Session, batch: Sequence[Delivery]) -> Recorded:
    now = utcnow()
    # In id order (stable, so of one id twice the first stays first): two PostgreSQL processes
    # inserting overlapping batches then take the rows' locks in the same order, never a deadlock.
    rows = [
        dict(delivery_id=d.delivery_id, event=d.event, action=d.action, received_at=now,
             processed_at=now, outcome=d.outcome, error=d.error)
        for d in sorted(batch, key=lambda d: d.delivery_id)
    ]
    # Through the session's connection (Core), not `Session.exec`: the ORM's handling of a
    # statement costs more than SQLite takes to run it, and there is no ORM object here.
    conn = s.connection()
    new, wakes = _new(batch, set(conn.execute(_insert(conn.dialect.name), rows).scalars().all()))
    # The batch's jobs in a few statements, not a few per wake.
    return Recorded(new, jobs.queue_wakes(s, wakes))


def _new(batch: Sequence[Delivery], inserted: set[str]) -> tuple[list[bool], list[dict[str, Any]]]:
    """Whether each delivery of the batch was recorded now, given the ids its insert returned;
    and the wakes of those that were. Of the same id twice in the batch, the first is the one
    inserted."""
    new: list[bool] = []
    wakes: list[dict[str, Any]] = []
    for d in batch:
        first = d.delivery_id in inserted
        inserted.discard(d.delivery_id)
        new.append(first)
        if first:
            wakes.extend(d.wakes)
    return new, wakes


_COLUMNS = ("delivery_id", "event", "action", "received_at", "processed_at", "outcome", "error")


def _record_sqlite(conn: sqlite3.Connection, batch: Sequence[Delivery]) -> Recorded:
    """`_record` on a plain sqlite3 connection in a write transaction (`Database.write`'s
    `plain`): the same rows, in the same order, with its statements written out instead of run
    through SQLAlchemy, whose execution path was nearly all of a batch's cost on a busy loop
    (docs/architecture.md). `tests/integration/test_intake_sqlite.py` compares the two."""
    now = sqlite_stamps()[0](utcnow())
    ordered = sorted(batch, key=lambda d: d.delivery_id)
    params = [v for d in ordered for v in (d.delivery_id, d.event, d.action, now, now, d.outcome, d.error)]
    insert = plain_insert("webhook_deliveries", _COLUMNS, len(ordered), "delivery_id", "delivery_id")
    new, wakes = _new(batch, {row[0] for row in conn.execute(insert, params).fetchall()})
    return Recorded(new, jobs.queue_wakes_sqlite(conn, wakes))


async def get(db: Database, delivery_id: str) -> WebhookDelivery | None:
    async with db.read_session() as s:
        return await s.get(WebhookDelivery, delivery_id)


async def seen(db: Database, delivery_ids: Iterable[str]) -> set[str]:
    """Which of these deliveries were recorded (their jobs queued) by any process."""
    return await present(db, col(WebhookDelivery.delivery_id), delivery_ids)


async def count(db: Database) -> int:
    async with db.read_session() as s:
        return len((await s.exec(select(WebhookDelivery.delivery_id))).all())


async def prune(db: Database, before: datetime, *, limit: int | None = None, dry_run: bool = False) -> int:
    """Forget deliveries older than `before` (their dedupe window is over), at most `limit`."""
    return await delete_old(db, WebhookDelivery, col(WebhookDelivery.delivery_id),
                            col(WebhookDelivery.received_at) < before, limit=limit, dry_run=dry_run)
