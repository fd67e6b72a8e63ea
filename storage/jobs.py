"""The durable job queue: enqueue by idempotency key, claim under a lease, finish.

Every transition after the claim is a compare-and-set on (id, lease_owner, status='running'),
so a worker whose lease expired and was reclaimed cannot overwrite the new owner's outcome.
"""

from __future__ import annotations

import functools
import json
import random
import sqlite3
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, NamedTuple, TypeVar, cast

from sqlalchemy import ColumnElement, Update, and_, bindparam, or_, orm, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.dml import ReturningInsert, ReturningUpdate
from sqlmodel import Session, col, select
from sqlmodel.ext.asyncio.session import AsyncSession
from sqlmodel.sql.expression import Select, SelectOfScalar

from .database import Database
from .keys import PrKey, ProcessKey
from .models import Job, read_pr_keys, utcnow
from .statements import (
    Shape,
    delete_old,
    plain_insert,
    present,
    set_clause,
    split_values,
    sqlite_stamps,
)
from .statuses import SameWork


class JobStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    DROPPED = "dropped"


def backoff_delay(attempts: int, base: float, cap: float, rand: random.Random | None = None) -> float:
    """Capped exponential backoff with jitter in [half, full] of the step."""
    step: float = min(cap, base * (2 ** max(0, attempts - 1)))  # (int ** int is typed Any)
    return step * (0.5 + 0.5 * (rand or random).random())


# The jobs this process asked to queue (or to bring forward), by kind, since it started; whether
# the rows were new or not. A worker compares the counts before and after a handler, and wakes
# only the lanes the handler gave work (bot/runtime/workers.py).
queued_by_kind: Counter[str] = Counter()


async def enqueue(db: Database, kind: str, key: str, **fields: Any) -> tuple[int, bool]:
    """Queue a job unless one with this idempotency key exists. Returns (job id, created)."""
    async with db.session() as s:
        return await enqueue_in(s, db.is_postgres, kind, key, **fields)


async def enqueue_in(
    session: AsyncSession,
    is_postgres: bool,
    kind: str,
    key: str,
    *,
    pr_key: PrKey | None = None,
    process_key: ProcessKey | None = None,
    round_no: int | None = None,
    payload: Mapping[str, Any] | None = None,
    run_at: datetime | None = None,
    delay_seconds: float = 0.0,
    max_attempts: int = 8,
    same_as: SameWork | None = None,
) -> tuple[int, bool]:
    """`enqueue` inside the caller's transaction.

    With `same_as`, the job coalesces: while one of its kind is queued (not yet running) for
    the same PR, or with the same payload, another is not added; the queued one runs at the
    earlier of the two times instead. A job already running does not count: it may have read
    GitHub before the news that queued the next one.
    """
    now = utcnow()
    run_at = run_at or now + timedelta(seconds=delay_seconds)
    queued_by_kind[kind] += 1
    same = _same(same_as, pr_key, payload)
    if same is not None:
        waiting = (
            await session.exec(
                select(col(Job.id), col(Job.run_at))
                .where(col(Job.kind) == kind, same, col(Job.status) == JobStatus.QUEUED).limit(1)
                # Locked (PostgreSQL): a claim of it while this transaction is open would read
                # the row without this transaction's writes, and no sync would come after them.
                .with_for_update()
            )
        ).first()
        if waiting is not None:
            # A stored row's id is set (the model's None is for a Job not inserted yet).
            job_id, queued_at = cast(int, waiting[0]), waiting[1]
            if run_at < queued_at:
                await session.exec(update(Job).where(col(Job.id) == job_id, col(Job.status) == JobStatus.QUEUED)
                                   .values(run_at=run_at))
            return job_id, False
    values = _row(kind, key, now, run_at, pr_key=pr_key, process_key=process_key, round_no=round_no,
                  payload=payload, max_attempts=max_attempts)
    conn = await session.connection()  # Core, with statements built once: a step queues several jobs
    inserted = (await conn.execute(_insert_new("postgresql" if is_postgres else "sqlite"), values)).first()
    if inserted is not None:
        return inserted[0], True
    return (await conn.execute(_ID_OF_KEY, {"key": key})).one()[0], False


def _same(same_as: SameWork | None, pr_key: PrKey | None, payload: Mapping[str, Any] | None) -> ColumnElement[bool] | None:
    """The test a queued job passes to be the same work as a new one, None if the new one does
    not coalesce (or names no PR to coalesce by)."""
    if same_as == SameWork.PR:
        return None if pr_key is None else col(Job.pr_key) == pr_key
    if same_as == SameWork.PAYLOAD:
        return col(Job.payload) == payload_text(payload)
    return None


@functools.cache
def _insert_new(dialect: str) -> ReturningInsert[int]:
    """New jobs' INSERT (their columns bound at execution), skipping a key that exists; it
    returns each new row's id, and nothing for a key that was there. With several rows'
    parameters, RETURNING makes SQLAlchemy send them as one multi-row INSERT (not executemany)."""
    table = Job.__table__
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    return insert(table).on_conflict_do_nothing(index_elements=["key"]).returning(table.c.id)


_ID_OF_KEY = select(Job.__table__.c.id).where(Job.__table__.c.key == bindparam("key"))


def _row(kind: str, key: str, now: datetime, run_at: datetime, *, pr_key: PrKey | None = None,
         process_key: ProcessKey | None = None, round_no: int | None = None,
         payload: Mapping[str, Any] | None = None, max_attempts: int = 8) -> dict[str, Any]:
    """A new queued job's columns."""
    return dict(kind=kind, key=key, pr_key=pr_key, process_key=process_key, round_no=round_no,
                payload=payload_text(payload), run_at=run_at, attempts=0,
                max_attempts=max_attempts, status=JobStatus.QUEUED, created_at=now)


def payload_text(payload: Mapping[str, Any] | None) -> str:
    """A job's payload as stored: JSON with sorted keys, so two payloads alike are one text (what
    `SameWork.PAYLOAD` compares)."""
    return json.dumps(dict(payload or {}), sort_keys=True)


BATCH = 500  # PR keys per statement: well under every backend's bound-parameter limit


async def enqueue_per_pr(
    session: AsyncSession,
    kind: str,
    pr_keys: Sequence[PrKey],
    key_of: Callable[[PrKey], str],
    *,
    run_at: datetime | None = None,
) -> int:
    """Queue a job of `kind` for each PR that has none queued, in the caller's transaction, with
    a few statements in all.

    The batch form of `enqueue_in` with `same_as=SameWork.PR`, but a queued job keeps its time:
    the poller must not pull forward a re-read a rate limit put off until when GitHub said. The
    rest are one multi-row INSERT per `BATCH` PRs, keyed by `key_of(pr_key)` and skipping a key
    that exists. Returns how many jobs were created.
    """
    now = utcnow()
    run_at = run_at or now
    wanted = list(dict.fromkeys(pr_keys))
    queued_by_kind[kind] += len(wanted)
    created = 0
    for start in range(0, len(wanted), BATCH):
        chunk = wanted[start:start + BATCH]
        waiting = set((await session.exec(select(Job.pr_key).where(
            Job.kind == kind, Job.status == JobStatus.QUEUED, col(Job.pr_key).in_(chunk)))).all())
        rows = [_row(kind, key_of(pr_key), now, run_at, pr_key=pr_key) for pr_key in chunk if pr_key not in waiting]
        created += await session.run_sync(_insert_rows, rows)
    return created


async def busy_pr_keys(db: Database, before: datetime) -> set[PrKey]:
    """The PRs with a job queued to run before `before` (their work under way or coming)."""
    async with db.read_session() as s:
        rows = (await s.exec(select(col(Job.pr_key)).distinct().where(
            Job.status == JobStatus.QUEUED, Job.run_at < before, col(Job.pr_key).is_not(None)))).all()
    return set(read_pr_keys(rows))


async def in_hand(db: Database, pr_key: PrKey, besides_id: int | None = None, before: datetime | None = None, *,
                  kinds: Collection[str] | None = None, besides_prefix: str | None = None) -> bool:
    """Whether the PR has a job other than `besides_id` running, or queued (to run before
    `before`, when given); only of `kinds` when given, and none whose key starts with
    `besides_prefix`."""
    queued = col(Job.status) == JobStatus.QUEUED
    query = select(Job.id).where(
        Job.pr_key == pr_key,
        or_(col(Job.status) == JobStatus.RUNNING, queued if before is None else and_(queued, col(Job.run_at) < before)))
    if besides_id is not None:
        query = query.where(Job.id != besides_id)
    if kinds is not None:
        query = query.where(col(Job.kind).in_(tuple(kinds)))
    if besides_prefix:
        query = query.where(col(Job.key).not_like(f"{besides_prefix}%"))
    async with db.read_session() as s:
        return (await s.exec(query.limit(1))).first() is not None


def _insert_rows(session: orm.Session, rows: list[dict[str, Any]]) -> int:
    """Insert new jobs' rows, skipping a key that exists; how many were inserted."""
    if not rows:
        return 0
    conn = session.connection()
    return len(conn.execute(_insert_new(conn.dialect.name), rows).all())


@functools.cache
def _waiting(kind: str, by: SameWork) -> Select[int, str, datetime]:
    """The queued jobs of `kind` whose `by` column is one of `values`, built once per pair (the
    intake runs it for every batch of deliveries, and building it was a sixth of a batch's
    cost)."""
    column = Job.__table__.c[by.value]
    # A stored job's id is set, and its column's value is one of `values` (none is None).
    return cast("Select[int, str, datetime]", select(Job.id, column, Job.run_at).where(
        Job.kind == kind, Job.status == JobStatus.QUEUED, column.in_(bindparam("values", expanding=True))))


@functools.cache
def _bring_forward() -> Update:
    """A queued job's `run_at` moved to `at` (bound with `job_id`) if it was later, built once."""
    table = Job.__table__
    at = bindparam("at", type_=table.c.run_at.type)
    return (update(table).where(table.c.id == bindparam("job_id"), table.c.status == JobStatus.QUEUED,
                                table.c.run_at > at).values(run_at=at))


async def bring_forward(session: AsyncSession, job_id: int, at: datetime) -> None:
    """Run the queued job `job_id` at `at` if it was to run later, in the caller's transaction."""
    await (await session.connection()).execute(_bring_forward(), {"job_id": job_id, "at": at})


class _Queueing(NamedTuple):
    """The three statements `queue_wakes` needs, on one connection in its transaction."""

    # The queued jobs of a kind that are the same work as any of `values`: (id, value, run_at).
    waiting: Callable[[str, SameWork, list[str]], Sequence[tuple[int, str, datetime]]]
    bring_forward: Callable[[int, datetime], None]  # a queued job's run_at moved earlier
    insert: Callable[[list[dict[str, Any]]], int]  # new jobs' rows, a key that exists skipped


def _core(session: Session) -> _Queueing:
    # Core on the session's connection, with statements built once: the intake runs this for
    # every batch of deliveries, and the ORM's handling of a statement cost more than SQLite
    # took to run it.
    conn = session.connection()

    def bring_forward(job_id: int, at: datetime) -> None:
        conn.execute(_bring_forward(), {"job_id": job_id, "at": at})

    def waiting(kind: str, by: SameWork, values: list[str]) -> Sequence[tuple[int, str, datetime]]:
        return conn.execute(_waiting(kind, by), {"values": values}).all()

    return _Queueing(waiting, bring_forward, lambda rows: _insert_rows(session, rows))


# The rows `_row` makes, in this order, for the plain sqlite3 statements below.
_ROW_COLUMNS = ("kind", "key", "pr_key", "process_key", "round_no", "payload", "run_at", "attempts",
                "max_attempts", "status", "created_at")


# Rows per plain INSERT: well under SQLite's bound on parameters.
_PLAIN_ROWS = BATCH // len(_ROW_COLUMNS)


def _plain(conn: sqlite3.Connection) -> _Queueing:
    stamp, read = sqlite_stamps()

    def waiting(kind: str, by: SameWork, values: list[str]) -> list[tuple[int, str, datetime]]:
        # `by` names a column (SameWork's values are the two column names), never user input.
        rows = conn.execute(
            f"SELECT id, {by.value}, run_at FROM jobs WHERE kind = ? AND status = ? "
            f"AND {by.value} IN ({', '.join('?' * len(values))})", [kind, JobStatus.QUEUED.value, *values]).fetchall()
        return [(job_id, value, read(run_at)) for job_id, value, run_at in rows]

    def bring_forward(job_id: int, at: datetime) -> None:
        when = stamp(at)
        conn.execute("UPDATE jobs SET run_at = ? WHERE id = ? AND status = ? AND run_at > ?",
                     (when, job_id, JobStatus.QUEUED.value, when))

    def insert(rows: list[dict[str, Any]]) -> int:
        inserted = 0
        for start in range(0, len(rows), _PLAIN_ROWS):
            chunk = rows[start:start + _PLAIN_ROWS]
            params = [stamp(row[n]) if n in ("run_at", "created_at") else row[n] for row in chunk for n in _ROW_COLUMNS]
            insert = plain_insert("jobs", _ROW_COLUMNS, len(chunk), "key", "id")
            inserted += len(conn.execute(insert, params).fetchall())
        return inserted

    return _Queueing(waiting, bring_forward, insert)


def queue_wakes(session: Session, wakes: Sequence[Mapping[str, Any]]) -> datetime | None:
    """`enqueue_in` for many jobs at once, in the caller's transaction, with a few statements:
    the same result as calling it for each in order (the wakes that are the same work coalesce
    into the one queued, which runs at the earliest of their times; a key queued before is
    skipped). Each wake is `enqueue_in`'s keyword arguments (`kind`, `key`, `pr_key`,
    `payload`, `delay_seconds`, `same_as`).

    Synchronous code: `Database.write`, or `AsyncSession.run_sync` from async code. Returns
    when the soonest of the jobs it queued or brought forward falls due, or None when it did
    neither (every wake coalesced into a job already queued as soon): the caller wakes the
    workers for that time, or not at all."""
    return _queue(_core(session), wakes) if wakes else None


def queue_wakes_sqlite(conn: sqlite3.Connection, wakes: Sequence[Mapping[str, Any]]) -> datetime | None:
    """`queue_wakes` on a plain sqlite3 connection inside a write transaction: the webhook
    intake's batch on a SQLite file (`deliveries.record_many`), where SQLAlchemy's execution
    path was nearly all of a batch's cost. The same decisions (`_queue`), the same rows
    (`tests/integration/test_intake_sqlite.py` compares them with `queue_wakes`')."""
    return _queue(_plain(conn), wakes) if wakes else None


def _queue(run: _Queueing, wakes: Sequence[Mapping[str, Any]]) -> datetime | None:
    now = utcnow()
    # The wakes that coalesce, by what makes them one: (kind, SameWork, the PR's key or the
    # payload's text) -> (the earliest run_at, the first one's key, its row's fields).
    same: dict[tuple[str, SameWork, str], tuple[datetime, str, dict[str, Any]]] = {}
    others: list[dict[str, Any]] = []
    for w in wakes:
        queued_by_kind[w["kind"]] += 1
        run_at = now + timedelta(seconds=w.get("delay_seconds") or 0.0)
        by = w.get("same_as")
        value = (w.get("pr_key") if by == SameWork.PR else payload_text(w.get("payload")) if by == SameWork.PAYLOAD
                 else None)
        if by is None or value is None:
            others.append(_row(w["kind"], w["key"], now, run_at, pr_key=w.get("pr_key"), payload=w.get("payload")))
            continue
        at, key, fields = same.get((w["kind"], by, value), (run_at, w["key"], {"pr_key": w.get("pr_key"),
                                                                              "payload": w.get("payload")}))
        same[(w["kind"], by, value)] = (min(at, run_at), key, fields)
    # A row skipped because its key exists still counts here: a needless wake costs one look.
    due = [row["run_at"] for row in others]
    # The wakes that are one work each coalesce into the one queued (brought forward if this
    # one is sooner), or else are one new row.
    for kind, by in dict.fromkeys((kind, by) for kind, by, _ in same):
        values = [value for k, b, value in same if (k, b) == (kind, by)]
        for job_id, value, run_at in run.waiting(kind, by, values):
            at, _, _ = same.pop((kind, by, value), (None, None, None))
            if at is not None and at < run_at:
                run.bring_forward(job_id, at)
                due.append(at)
    others += [_row(kind, key, now, at, pr_key=fields["pr_key"], payload=fields["payload"])
               for (kind, _, _), (at, key, fields) in same.items()]
    due += [at for at, _, _ in same.values()]
    if others:
        run.insert(others)
    return min(due, default=None)


def _due(now: ColumnElement[datetime]) -> ColumnElement[bool]:
    # A running job whose lease ran out belongs to a worker that died: it is due again.
    return or_(
        and_(col(Job.status) == JobStatus.QUEUED, col(Job.run_at) <= now),
        and_(col(Job.status) == JobStatus.RUNNING, col(Job.lease_until) < now),
    )


_Query = TypeVar("_Query", Select[*tuple[Any, ...]], SelectOfScalar[Any])


def _lane(query: _Query, kinds: tuple[str, ...] | None, besides: tuple[str, ...]) -> _Query:
    if kinds is not None:
        query = query.where(col(Job.kind).in_(kinds))
    if besides:
        query = query.where(col(Job.kind).not_in(besides))
    return query


class _Claim(NamedTuple):
    """A lane's claim statements, built once (a claim runs for every job, and building them
    anew cost as much as running them). Bound: `now`, and for a take `owner` and `until`."""

    queued: Select[datetime, int | None]  # the lane's first queued job due by `now`: (run_at, id)
    expired: Select[datetime, int | None]  # its first running job whose lease ran out: (run_at, id)
    take: ReturningUpdate[Job]  # SQLite: the job `job_id`, taken under the write lock
    take_first: ReturningUpdate[Job]  # PostgreSQL: the first due job no other transaction holds, taken


@functools.lru_cache(maxsize=16)  # one per worker lane
def _claim_statements(kinds: tuple[str, ...] | None, besides: tuple[str, ...]) -> _Claim:
    stamp = Job.__table__.c.run_at.type
    now = bindparam("now", type_=stamp)
    order = (col(Job.run_at), col(Job.id))
    queued = _lane(select(Job.run_at, Job.id).where(Job.status == JobStatus.QUEUED, Job.run_at <= now),
                   kinds, besides).order_by(*order).limit(1)
    expired = _lane(select(Job.run_at, Job.id).where(Job.status == JobStatus.RUNNING, Job.lease_until < now),
                    kinds, besides).order_by(*order).limit(1)
    first = _lane(select(Job.id).where(_due(now)), kinds, besides).order_by(*order).limit(1)

    def take(*where: ColumnElement[bool]) -> ReturningUpdate[Job]:
        return (update(Job).where(*where)
                .values(status=JobStatus.RUNNING, lease_owner=bindparam("owner"),
                        lease_until=bindparam("until", type_=stamp), started_at=now, attempts=Job.attempts + 1)
                .returning(Job).execution_options(synchronize_session=False))

    return _Claim(queued, expired, take(col(Job.id) == bindparam("job_id")),
                  take(col(Job.id) == first.with_for_update(skip_locked=True).scalar_subquery(), _due(now)))


async def _next_due(session: AsyncSession, now: datetime, statements: _Claim) -> int | None:
    """The id of the lane's first due job (by run_at, then id), or None.

    Two queries, not one with `_due`'s OR: each walks an index in order and stops at its first
    row, where the OR made SQLite gather every due job and sort them (a few thousand queued
    jobs at scale, on every look)."""
    conn = await session.connection()  # Core: two columns, no ORM entity to build
    found = [row for q in (statements.queued, statements.expired)
             if (row := (await conn.execute(q, {"now": now})).first()) is not None]
    return min(found)[1] if found else None


async def claim(db: Database, owner: str, lease_seconds: float, *, kinds: Collection[str] | None = None,
                besides: Collection[str] = (), look: bool = True) -> Job | None:
    """Take the next due job under a lease, or None when nothing is due; only of `kinds` when
    given, and never of `besides` (a worker lane's share of the queue).

    `look`: first look without the write lock. Most claims of woken or polling workers find
    nothing (or nothing of their lane), and each write transaction queues for SQLite's one
    writer with the webhook intake and every other worker; a worker whose last claim found a
    job skips the look (while the queue is long, it finds one)."""
    now = utcnow()
    params = {"owner": owner, "until": now + timedelta(seconds=lease_seconds), "now": now}
    statements = _claim_statements(tuple(kinds) if kinds is not None else None, tuple(besides))
    if db.is_postgres:
        # Replicas' workers claim side by side: each skips the rows another holds.
        async with db.session() as s:
            return await _take(s, statements.take_first, params)
    if look:
        async with db.read_session() as r:
            if await _next_due(r, now, statements) is None:
                return None
    # The pick under the write lock, so workers woken together never race for one job.
    async with db.session() as s:
        job_id = await _next_due(s, now, statements)
        if job_id is None:
            return None
        return await _take(s, statements.take, {**params, "job_id": job_id})


async def _take(session: AsyncSession, take: ReturningUpdate[Job], params: Mapping[str, Any]) -> Job | None:
    # sqlmodel types the rows of an UPDATE's result as Any: these are the Jobs it RETURNs.
    return cast(Job | None, (await session.exec(take, params=params)).scalars().first())


def _mine() -> ColumnElement[bool]:
    # The owner, not just `running`: a worker whose lease expired and whose job another worker
    # re-claimed must not complete, fail, reschedule or renew the job the other now runs.
    return and_(
        col(Job.id) == bindparam("job_id"), col(Job.lease_owner) == bindparam("owner"),
        col(Job.status) == JobStatus.RUNNING,
    )


# `reschedule` hands back the attempt its claim spent.
_ATTEMPT_BACK = Job.attempts - 1


@functools.lru_cache(maxsize=16)
def _finishing(shape: Shape) -> Update:
    """`_finish`'s UPDATE for one shape of its values, built once (a job's end runs for every
    job, and building the statement and its cache key was most of its cost)."""
    return update(Job.__table__).where(_mine()).values(set_clause(Job.__table__, shape))


async def _finish(db: Database, job: Job, **values: Any) -> bool:
    shape, params = split_values(values)
    async with db.session() as s:
        # Core on the session's connection: the session holds no Job, nothing for the ORM to
        # bring up to date.
        result = await (await s.connection()).execute(
            _finishing(shape), {**params, "job_id": job.id, "owner": job.lease_owner})
        return result.rowcount == 1


async def complete(db: Database, job: Job) -> bool:
    return await _finish(
        db, job, status=JobStatus.DONE, finished_at=utcnow(), lease_until=None, last_error=None
    )


async def drop(db: Database, job: Job, why: str) -> bool:
    return await _finish(
        db, job, status=JobStatus.DROPPED, finished_at=utcnow(), lease_until=None, last_error=why
    )


async def give_up(db: Database, job: Job, error: str) -> bool:
    return await _finish(
        db, job, status=JobStatus.FAILED, finished_at=utcnow(), lease_until=None, last_error=error
    )


async def fail(db: Database, job: Job, error: str, delay_seconds: float) -> bool:
    """Retry after `delay_seconds`, or give up once max_attempts is spent."""
    if job.attempts >= job.max_attempts:
        return await give_up(db, job, error)
    return await _finish(
        db,
        job,
        status=JobStatus.QUEUED,
        run_at=utcnow() + timedelta(seconds=delay_seconds),
        lease_owner=None,
        lease_until=None,
        last_error=error,
    )


async def reschedule(db: Database, job: Job, at: datetime, why: str) -> bool:
    """Put the job back for `at` without spending an attempt (rate limits, lease hand-back)."""
    return await _finish(
        db,
        job,
        status=JobStatus.QUEUED,
        run_at=at,
        attempts=_ATTEMPT_BACK,
        lease_owner=None,
        lease_until=None,
        last_error=why,
    )


async def renew_lease(db: Database, job: Job, lease_seconds: float) -> bool:
    return await _finish(db, job, lease_until=utcnow() + timedelta(seconds=lease_seconds))


async def get_job(db: Database, job_id: int) -> Job | None:
    async with db.session() as s:
        return await s.get(Job, job_id)


async def list_jobs(db: Database, pr_key: PrKey | None = None) -> list[Job]:
    async with db.read_session() as s:
        query = select(Job).order_by(col(Job.id))
        if pr_key is not None:
            query = query.where(Job.pr_key == pr_key)
        return list(await s.exec(query))


async def prune(db: Database, before: datetime, failed_before: datetime | None = None, *,
                limit: int | None = None, dry_run: bool = False) -> int:
    """Delete finished jobs older than `before` (failed ones: `failed_before`, kept longer for a
    look), at most `limit` of them; how many (in a dry run: how many would go, all of them). The
    outcome lives in the PR, run and round rows, not here."""
    old = or_(and_(col(Job.status).in_((JobStatus.DONE, JobStatus.DROPPED)), col(Job.finished_at) < before),
              and_(col(Job.status) == JobStatus.FAILED, col(Job.finished_at) < (failed_before or before)))
    return await delete_old(db, Job, col(Job.id), old, limit=limit, dry_run=dry_run)


async def pending_pr_keys(db: Database, kind: str) -> set[PrKey]:
    """PRs that already have a job of this kind waiting to run."""
    async with db.session() as s:
        rows = await s.exec(select(Job.pr_key).where(Job.kind == kind, Job.status == JobStatus.QUEUED))
        return set(read_pr_keys(rows))


async def existing_keys(db: Database, keys: Collection[str]) -> set[str]:
    """Which of these idempotency keys a job holds already (whatever its status)."""
    return await present(db, col(Job.key), keys)
