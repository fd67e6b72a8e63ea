"""Named cursors (storage/models.py `Cursor`): where a periodic reader got to, as text."""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import select
from sqlmodel.ext.asyncio.session import AsyncSession

from .database import Database
from .models import Cursor, utcnow
from .statements import on_postgres


async def load(db: Database, prefix: str = "") -> dict[str, str]:
    """Every cursor whose name starts with `prefix`."""
    async with db.read_session() as s:
        rows = (await s.exec(select(Cursor).where(Cursor.name.startswith(prefix)))).all()
        return {c.name: c.value for c in rows}


async def save_in(session: AsyncSession, values: Mapping[str, str]) -> None:
    """Insert or replace, in the caller's transaction (so a cursor moves with what it led to)."""
    if not values:
        return
    now = utcnow()
    dialect = postgresql if on_postgres(session) else sqlite
    stmt = dialect.insert(Cursor.__table__)
    stmt = stmt.on_conflict_do_update(index_elements=["name"],
                                      set_={"value": stmt.excluded.value, "updated_at": stmt.excluded.updated_at})
    await session.exec(stmt, params=[{"name": k, "value": v, "updated_at": now} for k, v in sorted(values.items())])


async def save(db: Database, values: Mapping[str, str]) -> None:
    async with db.session() as s:
        await save_in(s, values)
