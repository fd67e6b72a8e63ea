"""The escalations aggregate."""

from __future__ import annotations

from sqlalchemy import bindparam, update
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from . import events
from .database import Database
from .keys import PrKey, ProcessKey
from .models import Escalation, utcnow


async def mark_open_stale(session: AsyncSession, pr_key: PrKey, *, except_id: int | None = None) -> int:
    """Every open escalation of the PR becomes `stale` (its question no longer stands)."""
    conds = [col(Escalation.pr_key) == pr_key, col(Escalation.status) == "open"]
    if except_id is not None:
        conds.append(col(Escalation.id) != except_id)
    stmt = update(Escalation).where(*conds).values(status="stale")
    return (await session.exec(stmt)).rowcount


async def create(
    session: AsyncSession, pr_key: PrKey, process_key: ProcessKey, round_no: int, kind: str, question: str,
    fingerprint: str,
) -> Escalation:
    esc = Escalation(pr_key=pr_key, process_key=process_key, round_no=round_no, kind=kind,
                     question=question, fingerprint=fingerprint, status="open", asked_at=utcnow())
    session.add(esc)
    await session.flush()
    events.note(session, "escalated", kind)
    return esc


# Built once: every step reads it (building it cost more than running it).
_OPEN = select(Escalation).where(Escalation.pr_key == bindparam("pr_key"), Escalation.status == "open").order_by(
    col(Escalation.id))


async def open_for(db: Database, pr_key: PrKey) -> list[Escalation]:
    async with db.read_session() as s:
        return list(await s.exec(_OPEN, params={"pr_key": pr_key}))


async def for_pr(db: Database, pr_key: PrKey) -> list[Escalation]:
    async with db.read_session() as s:
        return list(await s.exec(select(Escalation).where(Escalation.pr_key == pr_key)
                                 .order_by(col(Escalation.id))))


async def get(db: Database, escalation_id: int) -> Escalation | None:
    async with db.read_session() as s:
        return await s.get(Escalation, escalation_id)


async def set_comment(db: Database, escalation_id: int, comment_id: int) -> None:
    async with db.session() as s:
        await s.exec(update(Escalation).where(col(Escalation.id) == escalation_id).values(comment_id=comment_id))


async def answer(session: AsyncSession, escalation_id: int, text: str, by: str) -> bool:
    """open → answered, once: a second answer to the same escalation changes nothing."""
    stmt = update(Escalation).where(col(Escalation.id) == escalation_id, col(Escalation.status) == "open").values(
        status="answered", answer=text, answered_by=by, answered_at=utcnow())
    return (await session.exec(stmt)).rowcount == 1
