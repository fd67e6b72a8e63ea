"""The adjudications aggregate: maintainer answers remembered per (pr_key, fingerprint)."""

from __future__ import annotations

from sqlalchemy import update
from sqlmodel.ext.asyncio.session import AsyncSession

from .models import Adjudication, utcnow


async def invalidate_all(session: AsyncSession, pr_key: str) -> int:
    """Revoke every live adjudication of the PR (resubmit, `/converge forget`)."""
    stmt = (
        update(Adjudication)
        .where(Adjudication.pr_key == pr_key, Adjudication.invalidated_at.is_(None))
        .values(invalidated_at=utcnow())
    )
    return (await session.exec(stmt)).rowcount
