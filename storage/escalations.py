"""The escalations aggregate."""

from __future__ import annotations

from sqlalchemy import update
from sqlmodel.ext.asyncio.session import AsyncSession

from .models import Escalation


async def mark_open_stale(session: AsyncSession, pr_key: str) -> int:
    """Every open escalation of the PR becomes `stale` (its question belongs to an older run)."""
    stmt = (
        update(Escalation)
        .where(Escalation.pr_key == pr_key, Escalation.status == "open")
        .values(status="stale")
    )
    return (await session.exec(stmt)).rowcount
