"""The dependencies aggregate: `Depends-on:` edges between PRs."""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import delete
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from .database import Database
from .models import Dependency, PullRequest


async def replace_for(db: Database, pr_key: str, depends_on: list[str]) -> None:
    async with db.session() as s:
        await s.exec(delete(Dependency).where(col(Dependency.pr_key) == pr_key))
        for dep in depends_on:
            s.add(Dependency(pr_key=pr_key, depends_on_key=dep))


async def edges(db: Database) -> dict[str, list[str]]:
    async with db.session() as s:
        rows = (await s.exec(select(Dependency))).all()
    out: dict[str, list[str]] = {}
    for row in rows:
        out.setdefault(row.pr_key, []).append(row.depends_on_key)
    return out


async def dependents(session: AsyncSession, pr_key: str) -> list[str]:
    """The PRs that depend on `pr_key` (in the caller's transaction)."""
    return list((await session.exec(select(Dependency.pr_key).where(Dependency.depends_on_key == pr_key))).all())


async def with_status(db: Database, pr_keys: Collection[str] | None = None) -> dict[str, list[tuple[str, str | None]]]:
    """Each PR's recorded dependencies (all PRs', or those of `pr_keys`), each with the stored
    status of the dependency's own row (None where the bot has no row for it)."""
    stmt = (select(Dependency.pr_key, Dependency.depends_on_key, PullRequest.status)
            .outerjoin(PullRequest, col(PullRequest.pr_key) == col(Dependency.depends_on_key)))
    if pr_keys is not None:
        stmt = stmt.where(col(Dependency.pr_key).in_(list(pr_keys)))
    async with db.read_session() as s:
        rows = (await s.exec(stmt)).all()
    out: dict[str, list[tuple[str, str | None]]] = {}
    for pr_key, dep, status in rows:
        out.setdefault(pr_key, []).append((dep, status))
    return out
