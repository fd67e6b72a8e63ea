"""The commands aggregate: an audit row per maintainer command, one per comment id."""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import update
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from .database import Database
from .keys import PrKey
from .models import Command, utcnow
from .statements import present


async def claim(db: Database, comment_id: int, pr_key: PrKey, author: str, verb: str, args: str | None) -> bool:
    """Record the command before acting on it; False if this comment was settled already.

    A row still marked `received` belongs to an attempt that died midway: a retry may go on,
    because every action a command takes is itself idempotent.
    """
    dialect = postgresql if db.is_postgres else sqlite
    async with db.session() as s:
        stmt = dialect.insert(Command.__table__).values(
            comment_id=comment_id, pr_key=pr_key, author=author, verb=verb, args=args,
            accepted=False, why="received", created_at=utcnow(),
        ).on_conflict_do_nothing(index_elements=["comment_id"])
        if (await s.exec(stmt)).rowcount == 1:
            return True
        row = (await s.exec(select(Command).where(Command.comment_id == comment_id))).one()
        return row.why == "received"


async def settle(session: AsyncSession, comment_id: int, accepted: bool, why: str) -> None:
    """In the caller's transaction, with the command's acknowledgement."""
    await session.exec(update(Command).where(col(Command.comment_id) == comment_id)
                       .values(accepted=accepted, why=why))


async def for_pr(db: Database, pr_key: PrKey) -> list[Command]:
    async with db.read_session() as s:
        return list(await s.exec(select(Command).where(Command.pr_key == pr_key).order_by(col(Command.id))))


async def known(db: Database, comment_ids: Collection[int]) -> set[int]:
    """Which of these comments were taken as commands already (settled or under way)."""
    return await present(db, col(Command.comment_id), comment_ids)
