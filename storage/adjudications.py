"""The adjudications aggregate: maintainer answers remembered per (pr_key, fingerprint)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import bindparam, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from .database import Database
from .keys import PrKey
from .models import Adjudication, utcnow
from .statements import on_postgres


async def invalidate_all(session: AsyncSession, pr_key: PrKey, *, given_by: datetime | None = None) -> int:
    """Revoke every live adjudication of the PR (resubmit, `/converge forget`); with `given_by`,
    only those given by then (a `/converge forget` forgets the answers its author had seen)."""
    conds = [col(Adjudication.pr_key) == pr_key, col(Adjudication.invalidated_at).is_(None)]
    if given_by is not None:
        conds.append(col(Adjudication.adjudicated_at) <= given_by)
    stmt = update(Adjudication).where(*conds).values(invalidated_at=utcnow())
    return (await session.exec(stmt)).rowcount


async def record(session: AsyncSession, pr_key: PrKey, fingerprint: str, answer: str, by: str) -> None:
    now = utcnow()
    values = {"answer": answer, "adjudicated_by": by, "adjudicated_at": now, "invalidated_at": None}
    dialect = postgresql if on_postgres(session) else sqlite
    stmt = dialect.insert(Adjudication.__table__).values(pr_key=pr_key, fingerprint=fingerprint, **values)
    await session.exec(stmt.on_conflict_do_update(index_elements=["pr_key", "fingerprint"], set_=values))


# Built once: every step reads it (building it cost more than running it).
_LIVE = select(Adjudication).where(Adjudication.pr_key == bindparam("pr_key"),
                                   col(Adjudication.invalidated_at).is_(None))


async def live_for(db: Database, pr_key: PrKey) -> list[Adjudication]:
    async with db.read_session() as s:
        return list(await s.exec(_LIVE, params={"pr_key": pr_key}))
