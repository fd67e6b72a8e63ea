"""The dependencies aggregate: `Depends-on:` edges between PRs."""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import delete
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from .database import Database
from .keys import PrKey
from .models import Dependency, PullRequest, read_pr_keys


async def replace_for(db: Database, pr_key: PrKey, depends_on: list[PrKey]) -> None:
    async with db.session() as s:
        await s.exec(delete(Dependency).where(col(Dependency.pr_key) == pr_key))
        for dep in depends_on:
            s.add(Dependency(pr_key=pr_key, depends_on_key=dep))


async def edges(db: Database) -> dict[PrKey, list[PrKey]]:
    async with db.session() as s:
        rows = (await s.exec(select(Dependency))).all()
    out: dict[PrKey, list[PrKey]] = {}
    for row in rows:
        out.setdefault(row.pr_key, []).append(row.depends_on_key)
    return out


async def dependents(session: AsyncSession, pr_key: PrKey) -> list[PrKey]:
    """The PRs that depend on `pr_key` (in the caller's transaction)."""
    return read_pr_keys((await session.exec(select(Dependency.pr_key).where(Dependency.depends_on_key == pr_key))).all())


async def with_status(db: Database, pr_keys: Collection[PrKey] | None = None) -> dict[PrKey, list[tuple[PrKey, str | None]]]:
    """Each PR's recorded dependencies (all PRs', or those of `pr_keys`), each with the stored
    status of the dependency's own row (None where the bot has no row for it)."""
    stmt = (select(Dependency.pr_key, Dependency.depends_on_key, PullRequest.status)
            .outerjoin(PullRequest, col(PullRequest.pr_key) == col(Dependency.depends_on_key)))
    if pr_keys is not None:
        stmt = stmt.where(col(Dependency.pr_key).in_(list(pr_keys)))
    async with db.read_session() as s:
        rows = (await s.exec(stmt)).all()
    out: dict[PrKey, list[tuple[PrKey, str | None]]] = {}
    for pr_key, dep, status in rows:
        [key, dep_key] = read_pr_keys((pr_key, dep))
        out.setdefault(key, []).append((dep_key, status))
    return out
