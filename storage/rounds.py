"""The rounds aggregate: one row per (pr_key, process_key, round_no)."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import Update, bindparam, func, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from . import events
from .database import Database
from .keys import PrKey, ProcessKey
from .models import Round, utcnow
from .statements import IN_BATCH, Shape, on_postgres, set_clause, split_values

# A rerun (husk, retry, resume after an answer) clears these, so a round without a result can
# never be read as having the previous attempt's result.
VERDICT_FIELDS = {
    "fixer_started_at": None, "fixer_finished_at": None, "verdict": None, "summary": None,
    "question": None, "status": None, "exit_head": None, "ended_at": None,
}


_GET = select(Round).where(Round.pr_key == bindparam("pr_key"), Round.process_key == bindparam("process_key"),
                           Round.round_no == bindparam("round_no"))  # built once: most steps read a round


async def get(db: Database, pr_key: PrKey, process_key: ProcessKey, round_no: int) -> Round | None:
    async with db.read_session() as s:
        return (await s.exec(_GET, params={"pr_key": pr_key, "process_key": process_key,
                                           "round_no": round_no})).first()


async def fixers_in_flight(db: Database, at: Iterable[tuple[str, str, int]]) -> dict[tuple[str, str, int], int]:
    """Of the rounds `at` (pr_key, process_key, round_no), those whose fixer was dispatched and
    that have no result yet, with their attempt: one read session, a statement per `IN_BATCH`
    PRs (the liveness check asks it of every converging PR each poll tick)."""
    wanted = set(at)
    keys = sorted({k for k, _, _ in wanted})
    found: dict[tuple[str, str, int], int] = {}
    async with db.read_session() as s:
        for start in range(0, len(keys), IN_BATCH):
            rows = await s.exec(select(Round.pr_key, Round.process_key, Round.round_no, Round.attempt).where(
                col(Round.pr_key).in_(keys[start:start + IN_BATCH]), col(Round.fixer_started_at).is_not(None),
                col(Round.status).is_(None)))
            found.update({(k, pk, n): attempt for k, pk, n, attempt in rows if (k, pk, n) in wanted})
    return found


_HISTORY = select(Round).where(
    Round.pr_key == bindparam("pr_key"), Round.process_key == bindparam("process_key")).order_by(col(Round.round_no))


async def history(db: Database, pr_key: PrKey, process_key: ProcessKey) -> list[Round]:
    async with db.read_session() as s:
        return list(await s.exec(_HISTORY, params={"pr_key": pr_key, "process_key": process_key}))


async def for_pr(db: Database, pr_key: PrKey) -> list[Round]:
    async with db.read_session() as s:
        return list(await s.exec(select(Round).where(Round.pr_key == pr_key).order_by(col(Round.id))))


async def count_kind(db: Database, pr_key: PrKey, process_key: ProcessKey, kind: str, since: datetime | None = None) -> int:
    """How many rounds of `kind` the run has had (started after `since`): the merge stage's fix
    budgets."""
    conds = [Round.pr_key == pr_key, Round.process_key == process_key, Round.kind == kind]
    if since is not None:
        conds.append(Round.started_at > since)
    async with db.read_session() as s:
        return (await s.exec(select(func.count()).select_from(Round).where(*conds))).one()


async def start(session: AsyncSession, pr_key: PrKey, process_key: ProcessKey, round_no: int, entry_head: str,
                kind: str = "review") -> None:
    """Create the round, or restart it at a new entry head with its verdict fields cleared.

    `attempt` survives a restart: it numbers every fixer dispatch of the round, so the jobs of a
    later dispatch never share an idempotency key with an earlier one. -1: none yet.
    """
    now = utcnow()
    values = {**VERDICT_FIELDS, "entry_head": entry_head, "review_id": None, "findings": None,
              "started_at": now, "kind": kind}
    dialect = postgresql if on_postgres(session) else sqlite
    stmt = dialect.insert(Round.__table__).values(
        pr_key=pr_key, process_key=process_key, round_no=round_no, attempt=-1, **values
    ).on_conflict_do_update(index_elements=["pr_key", "process_key", "round_no"], set_=values)
    await session.exec(stmt)
    events.note(session, "round_started", kind)


async def update_round(
    session: AsyncSession, pr_key: PrKey, process_key: ProcessKey, round_no: int, values: dict[str, Any],
    *, expect_attempt: int | None = None, open_only: bool = False,
) -> bool:
    """Update the round; with `expect_attempt` only while that dispatch is the round's latest,
    with `open_only` only while the round has no result yet. True if it applied."""
    shape, params = split_values(values)
    params.update(w_pr_key=pr_key, w_process_key=process_key, w_round=round_no)
    if expect_attempt is not None:
        params["w_attempt"] = expect_attempt
    stmt = _updating(shape, expect_attempt is not None, open_only)
    return (await (await session.connection()).execute(stmt, params)).rowcount == 1


@functools.lru_cache(maxsize=64)
def _updating(shape: Shape, by_attempt: bool, open_only: bool) -> Update:
    """`update_round`'s UPDATE for these columns and conditions, built once (building it cost
    more than running it). Core on the table: no session holds the Round to bring up to date."""
    conds = [col(Round.pr_key) == bindparam("w_pr_key"), col(Round.process_key) == bindparam("w_process_key"),
             col(Round.round_no) == bindparam("w_round")]
    if by_attempt:
        conds.append(col(Round.attempt) == bindparam("w_attempt"))
    if open_only:
        conds.append(col(Round.status).is_(None))
    return update(Round.__table__).where(*conds).values(set_clause(Round.__table__, shape))


async def next_attempt(
    session: AsyncSession, pr_key: PrKey, process_key: ProcessKey, round_no: int, values: dict[str, Any],
    *, expect_attempt: int | None = None,
) -> int | None:
    """Number a new fixer dispatch of the round (and write `values` with it).

    With `expect_attempt` it is a compare-and-set on the dispatch being replaced: two checks
    of one attempt (the fixer's and the deadline's, in two processes) cannot both start a
    rerun, nor rerun a round the other already ended; the loser gets None.
    """
    where = (col(Round.pr_key) == pr_key, col(Round.process_key) == process_key, col(Round.round_no) == round_no)
    cas = ((*where, col(Round.attempt) == expect_attempt, col(Round.status).is_(None)) if expect_attempt is not None
           else where)
    if (await session.exec(update(Round).where(*cas).values(attempt=Round.attempt + 1, **values))).rowcount != 1:
        return None
    return (await session.exec(select(Round.attempt).where(*where))).one()
