"""The runs aggregate: one convergence attempt per process_key, never reused."""

from __future__ import annotations

import uuid

from sqlalchemy import update
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from .database import Database
from .keys import PrKey, ProcessKey
from .models import Run, utcnow
from .statuses import RunKind, RunState


def new_process_key() -> ProcessKey:
    return ProcessKey(f"run-{uuid.uuid4().hex}")


def new_run(pr_key: PrKey, kind: RunKind = RunKind.CONVERGENCE) -> Run:
    return Run(
        process_key=new_process_key(),
        pr_key=pr_key,
        kind=kind,
        state=RunState.ACTIVE,
        started_at=utcnow(),
    )


async def record(session: AsyncSession, run: Run) -> None:
    """Write a new run in the caller's transaction, the one that points its PR's row at it: a run
    committed apart from its row is, after a crash between the two, active with no row to drive."""
    session.add(run)
    await session.flush()


async def end_run(
    db: Database | None,
    process_key: ProcessKey,
    state: RunState,
    reason: str,
    *,
    session: AsyncSession | None = None,
) -> bool:
    """Move an active run to `completed` or `terminated`; False if it had already ended."""
    stmt = (
        update(Run)
        .where(col(Run.process_key) == process_key, col(Run.state) == RunState.ACTIVE)
        .values(state=state, ended_at=utcnow(), reason=reason)
    )
    if session is not None:
        return (await session.exec(stmt)).rowcount == 1
    assert db is not None, "end_run takes a database or a session"
    async with db.session() as s:
        return (await s.exec(stmt)).rowcount == 1


async def terminate_run(db: Database, process_key: ProcessKey, reason: str) -> bool:
    return await end_run(db, process_key, RunState.TERMINATED, reason)


async def get_run(db: Database, process_key: ProcessKey) -> Run | None:
    async with db.session() as s:
        return await s.get(Run, process_key)


async def runs_for(db: Database, pr_key: PrKey) -> list[Run]:
    async with db.read_session() as s:
        rows = await s.exec(select(Run).where(Run.pr_key == pr_key).order_by(col(Run.started_at)))
        return list(rows)
