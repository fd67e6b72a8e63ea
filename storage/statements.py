"""What the aggregates' statements share: the dialect a session speaks, an UPDATE built once per
shape of its values and bound at each run, reads of which values are present asked in batches, and
the plain sqlite3 statements and time stamps of the webhook intake's fast path."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any, TypeVar, cast

from sqlalchemy import ColumnElement, Table, bindparam, delete, func
from sqlalchemy.dialects.sqlite import pysqlite
from sqlalchemy.orm import Mapped
from sqlmodel import select
from sqlmodel.ext.asyncio.session import AsyncSession

from .database import Database
from .models import UTCDateTime

V = TypeVar("V", str, int)  # a key column's values (`present`)

# Values per `IN (...)` list: well under every backend's bound-parameter limit.
IN_BATCH = 500


# An UPDATE built once and bound at each run: `fenced_update`, a job's end, a round's update.
# Building a statement and its cache key anew cost more than running it on the hot paths.
Shape = tuple[tuple[str, ColumnElement[Any] | None], ...]


def on_postgres(session: AsyncSession) -> bool:
    """Whether the session's database is PostgreSQL (else SQLite)."""
    bind = session.bind
    assert bind is not None, "a Database's sessions are bound to its engine"
    return bind.dialect.name == "postgresql"


def split_values(values: Mapping[str, Any]) -> tuple[Shape, dict[str, Any]]:
    """A write's values as its shape and its parameters. The shape names each column set, in
    order, with the SQL expression given for it or None; it keys the statement built once
    (`set_clause`). Every other value is a parameter, bound as `v_<column>`."""
    shape = tuple(sorted((k, v if isinstance(v, ColumnElement) else None) for k, v in values.items()))
    return shape, {f"v_{k}": v for k, v in values.items() if not isinstance(v, ColumnElement)}


def set_clause(table: Table, shape: Iterable[tuple[str, ColumnElement[Any] | None]]) -> dict[str, Any]:
    """The SET of an UPDATE of `table` for one shape (`split_values`): each column's value bound
    as `v_<column>` with the column's type, or the SQL expression the shape carries."""
    columns = table.c
    return {name: expr if expr is not None else bindparam(f"v_{name}", type_=columns[name].type)
            for name, expr in shape}


@functools.cache
def sqlite_stamps() -> tuple[Callable[[datetime], str], Callable[[str], datetime]]:
    """How SQLAlchemy writes and reads a time column (`UTCDateTime`) on SQLite: what plain
    sqlite3 statements use, so they store and read exactly what the Core ones do."""
    dialect = pysqlite.dialect()
    kind = UTCDateTime().dialect_impl(dialect)
    # SQLAlchemy types both as optional (a type may need no processing); a TypeDecorator with
    # process_bind_param and process_result_value always has both.
    return (cast(Callable[[datetime], str], kind.bind_processor(dialect)),
            cast(Callable[[str], datetime], kind.result_processor(dialect, None)))


@functools.lru_cache(maxsize=128)
def plain_insert(table: str, columns: tuple[str, ...], rows: int, key: str, returning: str) -> str:
    """A plain sqlite3 INSERT of `rows` rows of `columns`, skipping a row whose `key` exists and
    returning `returning` of each row inserted (what `on_conflict_do_nothing().returning()`
    sends through SQLAlchemy)."""
    marks = "(" + ", ".join("?" * len(columns)) + ")"
    return (f"INSERT INTO {table} ({', '.join(columns)}) VALUES {', '.join([marks] * rows)} "
            f"ON CONFLICT ({key}) DO NOTHING RETURNING {returning}")


async def present(db: Database, column: Mapped[V], values: Iterable[V]) -> set[V]:
    """Which of `values` some row holds in `column` (a model's column attribute, `col(Model.x)`),
    asked in batches of `IN_BATCH`, in one read session."""
    wanted, found = sorted(set(values)), set[V]()
    async with db.read_session() as s:
        for start in range(0, len(wanted), IN_BATCH):
            found.update((await s.exec(select(column).where(column.in_(wanted[start:start + IN_BATCH])))).all())
    return found


async def delete_old(db: Database, model: Any, key: Any, cond: ColumnElement[bool], *,
                     limit: int | None = None, dry_run: bool = False) -> int:
    """Delete the rows of `model` matching `cond`: at most `limit` of them (chosen by `key`, in
    one short transaction however many match), or all; how many. A dry run deletes nothing and
    counts every row that matches."""
    async with db.session() as s:
        if dry_run:
            return (await s.exec(select(func.count()).select_from(model).where(cond))).one()
        stmt = delete(model).where(cond) if limit is None else delete(model).where(
            key.in_(select(key).where(cond).limit(limit).scalar_subquery()))
        return (await s.exec(stmt)).rowcount
