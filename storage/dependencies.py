"""The dependencies aggregate: edges between PRs, each with where it was given.

A `body` edge is a `Depends-on:` line of the PR's body, replaced at each read of the body; an
`explicit` edge was given at enrollment (`submit --depends-on`, the API, `/converge start
--depends-on`) and is kept, since no read of GitHub can give it back. A PR depends on the union."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from sqlalchemy import delete
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from .database import Database
from .keys import PrKey
from .models import Dependency, PullRequest, read_pr_keys

BODY, EXPLICIT = "body", "explicit"
SOURCES = (BODY, EXPLICIT)


async def replace_for(db: Database, pr_key: PrKey, depends_on: list[PrKey]) -> list[PrKey]:
    """Record `depends_on` as the PR's body's dependencies, replacing those read before; all
    of its dependencies as they then stand: the body's, then the explicit ones not among them."""
    async with db.session() as s:
        await s.exec(delete(Dependency).where(col(Dependency.pr_key) == pr_key, col(Dependency.source) == BODY))
        for dep in depends_on:
            s.add(Dependency(pr_key=pr_key, depends_on_key=dep, source=BODY))
        explicit = await _explicit(s, pr_key)
    return [*depends_on, *(k for k in explicit if k not in depends_on)]


async def add_explicit(session: AsyncSession, pr_key: PrKey, depends_on: Iterable[PrKey]) -> None:
    """Add the PR's explicit dependencies (in the caller's transaction, its enrollment's); those
    it has already are kept, once."""
    have = set(await _explicit(session, pr_key))
    for dep in depends_on:
        if dep not in have:
            session.add(Dependency(pr_key=pr_key, depends_on_key=dep, source=EXPLICIT))
            have.add(dep)


def explicit_rows(pr_key: PrKey, depends_on: Iterable[PrKey]) -> list[Dependency]:
    """The rows of a new PR's explicit dependencies, for its insert to write with the row."""
    return [Dependency(pr_key=pr_key, depends_on_key=dep, source=EXPLICIT) for dep in dict.fromkeys(depends_on)]


async def _explicit(session: AsyncSession, pr_key: PrKey) -> list[PrKey]:
    stmt = select(Dependency.depends_on_key).where(Dependency.pr_key == pr_key, Dependency.source == EXPLICIT)
    return read_pr_keys((await session.exec(stmt)).all())


async def edges(db: Database) -> dict[PrKey, list[PrKey]]:
    async with db.session() as s:
        rows = (await s.exec(select(Dependency))).all()
    out: dict[PrKey, list[PrKey]] = {}
    for row in rows:
        deps = out.setdefault(row.pr_key, [])
        if row.depends_on_key not in deps:  # given both ways: one edge
            deps.append(row.depends_on_key)
    return out


async def dependents(session: AsyncSession, pr_key: PrKey) -> list[PrKey]:
    """The PRs that depend on `pr_key` (in the caller's transaction)."""
    stmt = select(Dependency.pr_key).where(Dependency.depends_on_key == pr_key).distinct()
    return read_pr_keys((await session.exec(stmt)).all())


async def with_status(db: Database, pr_keys: Collection[PrKey] | None = None
                      ) -> dict[PrKey, list[tuple[PrKey, str | None, str]]]:
    """Each PR's recorded dependencies (all PRs', or those of `pr_keys`), each with the stored
    status of the dependency's own row (None where the bot has no row for it) and where it was
    given; a dependency given both ways comes twice, once per source."""
    stmt = (select(Dependency.pr_key, Dependency.depends_on_key, PullRequest.status, Dependency.source)
            .outerjoin(PullRequest, col(PullRequest.pr_key) == col(Dependency.depends_on_key)))
    if pr_keys is not None:
        stmt = stmt.where(col(Dependency.pr_key).in_(list(pr_keys)))
    async with db.read_session() as s:
        rows = (await s.exec(stmt)).all()
    out: dict[PrKey, list[tuple[PrKey, str | None, str]]] = {}
    for pr_key, dep, status, source in rows:
        [key, dep_key] = read_pr_keys((pr_key, dep))
        out.setdefault(key, []).append((dep_key, status, source))
    return out
