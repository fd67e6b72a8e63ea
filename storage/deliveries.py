"""The webhook_deliveries aggregate: each X-GitHub-Delivery is handled once."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import select

from . import jobs
from .database import Database
from .models import WebhookDelivery, utcnow


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
    now = utcnow()
    dialect = postgresql if db.is_postgres else sqlite
    async with db.session() as s:
        stmt = dialect.insert(WebhookDelivery.__table__).values(
            delivery_id=delivery_id, event=event, action=action, received_at=now,
            processed_at=now, outcome=outcome, error=error,
        ).on_conflict_do_nothing(index_elements=["delivery_id"])
        if (await s.exec(stmt)).rowcount != 1:
            return False
        for wake in wakes:
            await jobs.enqueue_in(s, db.is_postgres, **wake)
    return True


async def get(db: Database, delivery_id: str) -> WebhookDelivery | None:
    async with db.session() as s:
        return await s.get(WebhookDelivery, delivery_id)


async def count(db: Database) -> int:
    async with db.session() as s:
        return len((await s.exec(select(WebhookDelivery.delivery_id))).all())


async def prune(db: Database, before) -> int:
    """Forget deliveries older than `before` (their dedupe window is over)."""
    from sqlalchemy import delete

    async with db.session() as s:
        stmt = delete(WebhookDelivery).where(WebhookDelivery.received_at < before)
        return (await s.exec(stmt)).rowcount
