"""The dependencies aggregate: edges between PRs, each with where it was given.

A `body` edge is a `Depends-on:` line of the PR's body, replaced at each read of the body; an
`explicit` edge was given at enrollment (`submit --depends-on`, the API, `/converge start
--depends-on`) and is kept, since no read of GitHub can give it back; a `stack` edge says the PR's
base branch is the other PR's head branch (docs/stacks.md), and is kept after the parent lands,
until the child is re-based (`restacked_at`). A PR depends on the union."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, or_, update
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from .database import Database
from .keys import PrKey
from .models import Dependency, PullRequest, read_pr_keys

BODY, EXPLICIT, STACK = "body", "explicit", "stack"
SOURCES = (BODY, EXPLICIT, STACK)


@dataclass(frozen=True)
class StackEdge:
    """A PR stacked on another: the parent, where the child's own commits begin when the bot
    recorded it (before it re-based the parent), and when the child was re-based."""

    child: PrKey
    parent: PrKey
    fork_point: str | None
    restacked_at: datetime | None


async def replace_for(db: Database, pr_key: PrKey, depends_on: list[PrKey]) -> list[PrKey]:
    """Record `depends_on` as the PR's body's dependencies, replacing those read before; all
    of its dependencies as they then stand: the body's, then the explicit and stack ones not
    among them."""
    async with db.session() as s:
        await s.exec(delete(Dependency).where(col(Dependency.pr_key) == pr_key, col(Dependency.source) == BODY))
        for dep in depends_on:
            s.add(Dependency(pr_key=pr_key, depends_on_key=dep, source=BODY))
        kept = await _kept(s, pr_key)
    return [*depends_on, *(k for k in kept if k not in depends_on)]


async def record_stack(session: AsyncSession, child: PrKey, parent: PrKey, fork_point: str | None = None) -> bool:
    """Record that `child` is stacked on `parent` (in the caller's transaction), with where its
    own commits begin when that is known (kept once the child was re-based); False when the
    edge was recorded before."""
    have = await session.get(Dependency, (child, parent, STACK))
    if have is not None:
        if fork_point and have.restacked_at is None:
            have.fork_point = fork_point
            session.add(have)
        return False
    session.add(Dependency(pr_key=child, depends_on_key=parent, source=STACK, fork_point=fork_point))
    return True


async def drop_stack(session: AsyncSession, child: PrKey, parent: PrKey) -> None:
    """Forget a stack whose child was moved off its parent's branch before the parent landed."""
    await session.exec(delete(Dependency).where(col(Dependency.pr_key) == child,
                                                col(Dependency.depends_on_key) == parent,
                                                col(Dependency.source) == STACK))


async def stacked_on(session: AsyncSession, child: PrKey) -> list[StackEdge]:
    """The child's stack edges (one, unless its base changed to another PR's branch)."""
    stmt = select(Dependency).where(Dependency.pr_key == child, Dependency.source == STACK)
    return [_edge(row) for row in (await session.exec(stmt)).all()]


async def stacked_children(session: AsyncSession, parent: PrKey) -> list[StackEdge]:
    """The PRs stacked on `parent` not yet re-based off it."""
    stmt = select(Dependency).where(Dependency.depends_on_key == parent, Dependency.source == STACK,
                                    col(Dependency.restacked_at).is_(None))
    return [_edge(row) for row in (await session.exec(stmt)).all()]


async def mark_restacked(session: AsyncSession, child: PrKey, parent: PrKey, at: datetime) -> bool:
    """The child was re-based off `parent` (once: False when it already was)."""
    result = await session.exec(update(Dependency).where(
        col(Dependency.pr_key) == child, col(Dependency.depends_on_key) == parent,
        col(Dependency.source) == STACK, col(Dependency.restacked_at).is_(None)).values(restacked_at=at))
    return bool(result.rowcount)


MAX_STACK = 50  # PRs a stack is followed through, either way (a guard against a loop of edges)


async def stacks(db: Database, pr_keys: Collection[PrKey]) -> dict[PrKey, tuple[PrKey, ...]]:
    """Each of `pr_keys` that is in a stack: the stack's PRs bottom-up (each PR's children after
    it, lowest number first), from its edges landed or not, read a level at a time."""
    up: dict[PrKey, PrKey] = {}
    down: dict[PrKey, list[PrKey]] = {}
    frontier, seen = set(pr_keys), set[PrKey]()
    async with db.read_session() as s:
        for _ in range(MAX_STACK):
            frontier -= seen
            if not frontier:
                break
            seen |= frontier
            stmt = select(Dependency.pr_key, Dependency.depends_on_key).where(
                col(Dependency.source) == STACK,
                or_(col(Dependency.pr_key).in_(list(frontier)), col(Dependency.depends_on_key).in_(list(frontier))))
            frontier = set()
            for child, parent in (await s.exec(stmt)).all():
                [child, parent] = read_pr_keys((child, parent))
                up.setdefault(child, parent)
                if child not in down.setdefault(parent, []):
                    down[parent].append(child)
                frontier |= {child, parent}
    out: dict[PrKey, tuple[PrKey, ...]] = {}
    for key in pr_keys:
        if key not in up and key not in down:
            continue
        bottom = key
        for _ in range(MAX_STACK):
            if bottom not in up or up[bottom] == key:
                break
            bottom = up[bottom]
        order: list[PrKey] = []
        todo = [bottom]
        while todo and len(order) < MAX_STACK:
            k = todo.pop(0)
            if k not in order:
                order.append(k)
                todo += sorted(down.get(k, ()), key=lambda c: c.number)
        out[key] = tuple(order)
    return out


def _edge(row: Dependency) -> StackEdge:
    [child, parent] = read_pr_keys((row.pr_key, row.depends_on_key))
    return StackEdge(child, parent, row.fork_point, row.restacked_at)


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


async def _kept(session: AsyncSession, pr_key: PrKey) -> list[PrKey]:
    """The PR's dependencies no read of its body replaces: explicit and stack edges, once each."""
    stmt = select(Dependency.depends_on_key).where(Dependency.pr_key == pr_key,
                                                   col(Dependency.source).in_((EXPLICIT, STACK)))
    return list(dict.fromkeys(read_pr_keys((await session.exec(stmt)).all())))


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
