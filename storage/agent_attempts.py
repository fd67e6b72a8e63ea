"""The agent attempts aggregate: one row per run of the fixer's agent, with what it spent."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import cast

from sqlalchemy import ColumnElement, bindparam, func
from sqlmodel import col, select

from .database import Database
from .keys import PrKey, ProcessKey
from .models import AgentAttempt


@dataclass(frozen=True)
class Spent:
    cost_usd: float
    seconds: float
    attempts: int
    unpriced: int  # attempts whose cost is not known (a CLI that reports none, no price set)


async def record(db: Database, attempt: AgentAttempt) -> None:
    async with db.session() as s:
        s.add(attempt)


# COALESCE(…, 0.0) is never NULL; SQLAlchemy types it as its first argument, which may be.
_COST = cast("ColumnElement[float]", func.coalesce(func.sum(col(AgentAttempt.cost_usd)), 0.0))
_SUMS = (_COST, func.coalesce(func.sum(col(AgentAttempt.seconds)), 0.0),
         func.count(), func.count() - func.count(col(AgentAttempt.cost_usd)))
_OF_RUN = select(*_SUMS).where(
    AgentAttempt.pr_key == bindparam("pr_key"), AgentAttempt.process_key == bindparam("process_key"),
    AgentAttempt.finished_at >= bindparam("since"))
_SINCE = select(*_SUMS).where(AgentAttempt.finished_at >= bindparam("since"))


async def of_run(db: Database, pr_key: PrKey, process_key: ProcessKey, since: datetime) -> Spent:
    """What the run's agent attempts finished at or after `since` spent."""
    async with db.read_session() as s:
        row = (await s.exec(_OF_RUN, params={"pr_key": pr_key, "process_key": process_key,
                                             "since": since})).one()
    return Spent(float(row[0]), float(row[1]), int(row[2]), int(row[3]))


async def since(db: Database, since: datetime) -> Spent:
    """What every agent attempt finished at or after `since` spent, across all PRs."""
    async with db.read_session() as s:
        row = (await s.exec(_SINCE, params={"since": since})).one()
    return Spent(float(row[0]), float(row[1]), int(row[2]), int(row[3]))


async def oldest_since(db: Database, since: datetime) -> datetime | None:
    """The first finish at or after `since` that holds a cost: when the hour's spend next falls."""
    async with db.read_session() as s:
        return (await s.exec(select(func.min(AgentAttempt.finished_at)).where(
            AgentAttempt.finished_at >= since, col(AgentAttempt.cost_usd).is_not(None)))).one()


async def for_pr(db: Database, pr_key: PrKey) -> list[AgentAttempt]:
    async with db.read_session() as s:
        return list(await s.exec(select(AgentAttempt).where(AgentAttempt.pr_key == pr_key)
                                 .order_by(col(AgentAttempt.id))))
