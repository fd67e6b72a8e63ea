"""Repository watch marks (see bot/intake/repowatch.py): loaded once at start, saved with the syncs
they led to, in the same transaction."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import select
from sqlmodel.ext.asyncio.session import AsyncSession

from .database import Database
from .models import RepoWatchMark, utcnow
from .statements import on_postgres


async def load(db: Database) -> dict[str, datetime]:
    async with db.read_session() as s:
        return {m.repo: m.mark for m in (await s.exec(select(RepoWatchMark))).all()}


async def save_in(session: AsyncSession, marks: Mapping[str, datetime]) -> None:
    """Write the marks in the caller's transaction (insert or replace)."""
    if not marks:
        return
    now = utcnow()
    dialect = postgresql if on_postgres(session) else sqlite
    table = RepoWatchMark.__table__
    stmt = dialect.insert(table)
    stmt = stmt.on_conflict_do_update(index_elements=["repo"],
                                      set_={"mark": stmt.excluded.mark, "updated_at": stmt.excluded.updated_at})
    await session.exec(stmt, params=[{"repo": r, "mark": m, "updated_at": now} for r, m in sorted(marks.items())])
