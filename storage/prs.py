"""The pull_requests aggregate: reads with ownership, the fenced write, insert and atomic reopen."""

from __future__ import annotations

import base64
import binascii
import functools
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import ColumnElement, Table, Update, and_, bindparam, exists, func, or_, update
from sqlalchemy import text as sql_text
from sqlalchemy.dialects import postgresql, sqlite
from sqlmodel import SQLModel, col, select
from sqlmodel.ext.asyncio.session import AsyncSession
from sqlmodel.sql.expression import Select

from .database import Database
from .keys import PrKey, PrKeyError, ProcessKey, parse_pr_key
from .models import Job, PullRequest, Run, read_pr_keys, utcnow
from .statements import Shape, on_postgres, present, set_clause, split_values
from .statuses import TERMINAL, RunState, Status, derived_status, is_resubmittable


@dataclass(frozen=True)
class PrView:
    """A PR row together with the state of the run that owns it."""

    pr: PullRequest
    run_state: str | None

    @property
    def derived_status(self) -> str:
        return derived_status(self.pr.status, self.pr.process_key, self.run_state)

    @property
    def awaits_review(self) -> bool:
        """An active run waiting for a review of the PR's head (nothing to do until one comes,
        a push, or a deadline)."""
        return (self.pr.status == Status.WAITING_REVIEW and self.pr.process_key is not None
                and self.run_state == RunState.ACTIVE)

    @property
    def resubmittable(self) -> bool:
        return is_resubmittable(self.pr.status, self.pr.process_key, self.run_state)


class MissingKey(LookupError):
    """A PR row or a job read where the code relies on a key it does not hold: a bug, not a race."""


def process_key_of(item: PullRequest | Job) -> ProcessKey:
    """The key of the run that owns a PR row, or of the run a job was queued for.

    For where the code relies on one: the row of a PR being driven (an active run's, read as not
    resubmittable) always holds its run's key, and a job a run queued for itself (a fix, a
    progress check, most effects) always carries it. The columns are nullable for the others: a
    row no run owns (a crash between insert and key publish), a job of no run (a sync)."""
    if item.process_key is None:
        what = f"the row of {item.pr_key}" if isinstance(item, PullRequest) else f"job {item.key!r}"
        raise MissingKey(f"{what} has no process key")
    return item.process_key


def pr_key_of(job: Job) -> PrKey:
    """The PR a job is for. Every job of a PR carries its key (the column is nullable for the
    few jobs of no one PR): a handler of a PR's job relies on it."""
    if job.pr_key is None:
        raise MissingKey(f"job {job.key!r} has no pr_key")
    return job.pr_key


def round_of(job: Job) -> int:
    """The round a job of a round is for (a fix, a progress check): queued with it always."""
    if job.round_no is None:
        raise MissingKey(f"job {job.key!r} has no round")
    return job.round_no


def _with_run() -> Select[PullRequest, str | None]:
    # An outer join: a PR with no run of its key has None for the run's state, which the
    # column's type does not say.
    return cast("Select[PullRequest, str | None]",
                select(PullRequest, Run.state).outerjoin(Run, col(Run.process_key) == col(PullRequest.process_key)))


# Built once: nearly every job reads its PR (building the statement cost a quarter of a read).
_GET = _with_run().where(PullRequest.pr_key == bindparam("pr_key"))


async def get(db: Database, pr_key: PrKey) -> PrView | None:
    async with db.read_session() as s:
        row = (await s.exec(_GET, params={"pr_key": pr_key})).first()
    return None if row is None else PrView(row[0], row[1])


async def list_all(db: Database, *, active_only: bool = False) -> list[PrView]:
    """Every PR ever enrolled, oldest first; with `active_only`, those of a run still being
    driven, read through the status index (a finished PR's row is not read: the history grows)."""
    if active_only:
        return _views(await _unfinished(db), active_only=True)
    async with db.read_session() as s:
        rows = (await s.exec(_with_run().order_by(col(PullRequest.created_at)))).all()
    return _views(rows, active_only=False)


async def list_unfinished(db: Database) -> list[PrView]:
    """The PRs whose status is not final, oldest first: the active ones, and any row a crash left
    without its run's key (the poller resumes those), but none of the finished history."""
    return _views(await _unfinished(db), active_only=False)


async def _unfinished(db: Database) -> Sequence[tuple[PullRequest, str | None]]:
    async with db.read_session() as s:
        return (await s.exec(unfinished_read())).all()


def unfinished_read() -> Select[PullRequest, str | None]:
    """The unfinished PRs, oldest first, through the status index: `NOT IN` the final statuses
    read every row of the history (a year's 120,000 on every poll tick and watchdog pass)."""
    return _with_run().where(col(PullRequest.status).in_(UNFINISHED)).order_by(col(PullRequest.created_at))


def _views(rows: Iterable[tuple[PullRequest, str | None]], *, active_only: bool) -> list[PrView]:
    """`_with_run()`'s rows as views; with `active_only`, those of a run still being driven."""
    views = [PrView(pr, state) for pr, state in rows]
    return [v for v in views if not v.resubmittable] if active_only else views


# The statuses a run still drives, or a crash left without its key: listed (not `NOT IN` the final
# ones) so the database reads them through the status index.
UNFINISHED = tuple(s.value for s in Status if s not in TERMINAL)
PAGE_LIMIT = 500  # rows a page holds at most, whatever is asked


class CursorError(ValueError):
    """A page cursor that this bot did not hand out (or that was cut short)."""


@dataclass(frozen=True)
class Cursor:
    """Where a page of PRs ends: the last row's enrollment time and key. Rows are listed in
    that order, which never changes for a row, so a page read later neither skips nor repeats."""

    created_at: datetime
    pr_key: PrKey

    def text(self) -> str:
        raw = f"{self.created_at.isoformat()}|{self.pr_key}".encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def parse(cls, text: str) -> Cursor:
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
            stamp, _, key = raw.partition("|")
            return cls(datetime.fromisoformat(stamp), parse_pr_key(key))
        except (binascii.Error, UnicodeDecodeError, ValueError, PrKeyError):
            raise CursorError(f"malformed cursor {text[:80]!r}: pass back the one a page gave") from None


@dataclass(frozen=True)
class Page:
    views: list[PrView]
    total: int  # rows the filters match, on every page
    next: Cursor | None  # where the next page starts; None on the last


async def page(db: Database, *, statuses: Collection[str] | None = None, repo: str | None = None,
               changed_since: datetime | None = None, after: Cursor | None = None,
               limit: int = 100) -> Page:
    """One page of PRs, oldest enrolled first, chosen by the database through its indexes: of
    the stored `statuses`, of `repo` (any case), and with `changed_since` only the working set
    (every unfinished PR, and the finished ones changed since then), never the whole history."""
    conds: list[ColumnElement[bool]] = []
    if changed_since is not None:
        conds.append(or_(col(PullRequest.status).in_(UNFINISHED), col(PullRequest.updated_at) >= changed_since))
    if statuses is not None:
        conds.append(col(PullRequest.status).in_(tuple(statuses)))
    if repo:
        conds.append(func.lower(PullRequest.repo) == repo.lower())
    limit = max(1, min(limit, PAGE_LIMIT))
    past = [] if after is None else [or_(
        col(PullRequest.created_at) > after.created_at,
        and_(col(PullRequest.created_at) == after.created_at, col(PullRequest.pr_key) > after.pr_key))]
    async with db.read_session() as s:
        total = (await s.exec(select(func.count()).select_from(PullRequest).where(*conds))).one()
        if changed_since is None:
            # The history in enrollment order: the order's index, walked from the cursor.
            rows = (await s.exec(_with_run().where(*conds, *past).order_by(
                col(PullRequest.created_at), col(PullRequest.pr_key)).limit(limit + 1))).all()
        else:
            # The working set (a few thousand at most) through its two indexes, ordered here: asked
            # for in the list's order, SQLite walked the order's index through the whole history
            # for the few recent rows (60 ms at 120,000 PRs; this way 11 ms, the page and its count included).
            found = (await s.exec(select(PullRequest.created_at, PullRequest.pr_key).where(*conds, *past))).all()
            keys = read_pr_keys(k for _, k in sorted((t, k) for t, k in found)[:limit + 1])  # tuples: Rows sort slowly
            by_key = {pr.pr_key: (pr, state) for pr, state in
                      (await s.exec(_with_run().where(col(PullRequest.pr_key).in_(keys)))).all()}
            rows = [by_key[k] for k in keys if k in by_key]
    views = _views(rows[:limit], active_only=False)
    more = len(rows) > limit
    return Page(views, total, Cursor(views[-1].pr.created_at, views[-1].pr.pr_key) if more else None)


# Each repository (case-folded) the table holds, found by hopping through the index on
# lower(repo): one seek per repository, where a GROUP BY read every PR row (130 ms at 120,000 PRs
# on SQLite, on the dashboard's every load; this way 0.1 ms). Both backends run it as written.
_REPOSITORIES = sql_text("""
WITH RECURSIVE r(repo) AS (
    SELECT min(lower(repo)) FROM pull_requests
    UNION ALL
    SELECT (SELECT min(lower(p.repo)) FROM pull_requests p WHERE lower(p.repo) > r.repo) FROM r
    WHERE r.repo IS NOT NULL
)
SELECT repo FROM r WHERE repo IS NOT NULL
""")


async def repositories(db: Database) -> list[str]:
    """Every repository the bot has enrolled a PR of, case-folded (GitHub's names are)."""
    async with db.read_session() as s:
        conn = await s.connection()
        rows = (await conn.execute(_REPOSITORIES)).all()
    return sorted(r for (r,) in rows if r)


async def known(db: Database, pr_keys: Collection[PrKey]) -> set[PrKey]:
    """Which of `pr_keys` have a row (any status): indexed reads, in batches."""
    return set(read_pr_keys(await present(db, col(PullRequest.pr_key), pr_keys)))


async def active_at(db: Database, repo: str, *, sha: str | None = None,
                    branch: str | None = None) -> list[PrView]:
    """The active PRs of `repo` (any case) whose head is `sha` or whose head branch is `branch`.

    Selected by the database: a status, check or push delivery's `sync_ref` asks this once, and
    loading every PR to pick them out cost a thousand rows per delivery at 1,000 PRs."""
    at = [col(PullRequest.head_sha) == sha] if sha else []
    at += [col(PullRequest.head_branch) == branch] if branch else []
    if not at:
        return []
    async with db.read_session() as s:
        rows = (await s.exec(_with_run().where(func.lower(PullRequest.repo) == repo.lower(), or_(*at)))).all()
    return _views(rows, active_only=True)


def _owned_by(process_key: Any) -> ColumnElement[bool]:
    # Ownership is the key on the row AND a run that is still active: a run terminated out of
    # band (abandon, lost race) must not keep writing through a key that is still on the row.
    return and_(
        # A run still active whose key is no longer on the row (superseded, its end not yet
        # written, or orphaned by a crashed submitter) must not write the row another run owns.
        col(PullRequest.process_key) == process_key,
        # A run ends in the transaction that writes its row's terminal status (or moves the key
        # away). PostgreSQL checks a writer held behind that transaction against the row's new
        # version but the run's old one (still active): this is the test that sees the end.
        col(PullRequest.status).not_in(TERMINAL),
        exists().where(col(Run.process_key) == process_key, col(Run.state) == RunState.ACTIVE),
    )


async def fenced_update(
    db: Database | None,
    pr_key: PrKey,
    process_key: ProcessKey,
    values: Mapping[str, Any],
    *,
    expect_status: str | Collection[str] | None = None,
    expect_round: int | None = None,
    expect: Mapping[str, Any] | None = None,
    session: AsyncSession | None = None,
) -> bool:
    """Update the PR row only while `process_key` owns it (and, if given, is in that status/round,
    and each column named in `expect` still holds the value given, None for NULL).

    The one way every writer changes a PR row. It is a single compare-and-set statement, so a
    straggler from an older run writes nothing; the caller learns whether it won.
    """
    shape, params = split_values(values)
    params.update(w_pr_key=pr_key, w_process_key=process_key, v_updated_at=utcnow())
    if expect_status is not None:
        params["w_statuses"] = [expect_status] if isinstance(expect_status, str) else list(expect_status)
    if expect_round is not None:
        params["w_round"] = expect_round
    for column, value in (expect or {}).items():
        if value is not None:
            params[f"e_{column}"] = value
    stmt = _fenced(shape, expect_status is not None, expect_round is not None,
                   tuple(sorted((column, value is None) for column, value in (expect or {}).items())))
    if session is not None:
        return (await (await session.connection()).execute(stmt, params)).rowcount == 1
    assert db is not None, "fenced_update takes a database or a session"
    async with db.session() as s:
        return (await (await s.connection()).execute(stmt, params)).rowcount == 1


@functools.lru_cache(maxsize=256)
def _fenced(shape: Shape, by_status: bool, by_round: bool,
            expect: tuple[tuple[str, bool], ...]) -> Update:
    """`fenced_update`'s UPDATE for one shape of call (the columns set, the expectations named),
    built once: building it and its cache key anew cost more than running it (a tenth of the
    bot's loop went to building statements at 1,000 PRs). Core on the table, run on the
    session's connection: no session holds a PR object for the ORM to bring up to date.

    Bound: `w_pr_key`, `w_process_key`, `w_statuses`, `w_round`, `e_<column>` for an expected
    value, `v_<column>` for each value set (and `v_updated_at`). A value given as an SQL
    expression is part of the statement."""
    columns = PullRequest.__table__.c
    conds = [col(PullRequest.pr_key) == bindparam("w_pr_key"), _owned_by(bindparam("w_process_key"))]
    if by_status:
        conds.append(col(PullRequest.status).in_(bindparam("w_statuses", expanding=True)))
    if by_round:
        conds.append(col(PullRequest.current_round) == bindparam("w_round"))
    for column, is_null in expect:
        attr = getattr(PullRequest, column)
        conds.append(attr.is_(None) if is_null else attr == bindparam(f"e_{column}", type_=columns[column].type))
    return update(PullRequest.__table__).where(*conds).values(
        set_clause(PullRequest.__table__, (*shape, ("updated_at", None))))


async def note_check_run(db: Database, pr_key: PrKey, process_key: ProcessKey, values: Mapping[str, Any]) -> bool:
    """Record the check run's head and id (`check_run_head`, `check_run_id`) while the row is
    still the run's, ended or not: the run only mirrors the row, and its last update (merged,
    abandoned) comes after the run's end. A row another run took over is left alone."""
    shape, params = split_values(values)
    params.update(w_pr_key=pr_key, w_process_key=process_key, v_updated_at=utcnow())
    async with db.session() as s:
        return (await (await s.connection()).execute(_noting(shape), params)).rowcount == 1


@functools.lru_cache(maxsize=8)
def _noting(shape: Shape) -> Update:
    """`note_check_run`'s UPDATE for one shape of its values, built once (as `_fenced`)."""
    return update(PullRequest.__table__).where(
        col(PullRequest.pr_key) == bindparam("w_pr_key"), col(PullRequest.process_key) == bindparam("w_process_key"),
    ).values(set_clause(PullRequest.__table__, (*shape, ("updated_at", None))))


def _insert_ignore(session: AsyncSession, table: Table) -> postgresql.Insert | sqlite.Insert:
    return postgresql.insert(table) if on_postgres(session) else sqlite.insert(table)


async def insert_new(db: Database, pr: PullRequest, run: Run, *, also: Iterable[SQLModel] = ()) -> bool:
    """Insert a never-seen PR already owned by `run`, with the rows that are its own (`also`:
    its explicit dependencies); False if the key exists (someone won).

    Compare-and-set on the primary key: row, run and `also` are written in one transaction, so
    the loser leaves nothing behind, and the winner's PR is never seen without its dependencies.
    """
    async with db.session() as s:
        values = pr.model_dump()
        stmt = _insert_ignore(s, PullRequest.__table__).values(**values).on_conflict_do_nothing(
            index_elements=["pr_key"]
        )
        # Two submitters that both read "no row" both insert: the one whose insert did nothing
        # lost, and must neither record its run nor report it started.
        if (await s.exec(stmt)).rowcount != 1:
            return False
        s.add(run)
        s.add_all(also)
    return True


def reopen_values(process_key: ProcessKey, options: Mapping[str, Any]) -> dict[str, Any]:
    """Everything a fresh run starts from: status, round 1, cleared baselines and replay stamps.
    The check run stays: on the same head a new run updates the one already there."""
    now = utcnow()
    return {
        **options,
        "process_key": process_key,
        "status": Status.CONVERGING,
        "current_round": 1,
        "waiting_since": None,
        "last_review_id": None,
        "last_nudge_at": None,
        "last_round_head": None,
        "husk_retries": 0,
        "last_progress_job_key": None,
        "last_progress_result": None,
        "outcome": None,
        "converged_head": None,
        "merge_approved": False,
        "converged_at": None,
        "merged_at": None,
        "escalated_at": None,
        "last_action": None,
        "updated_at": now,
    }


async def reopen(
    session: AsyncSession,
    pr_key: PrKey,
    *,
    old_process_key: ProcessKey | None,
    new_process_key: ProcessKey,
    options: Mapping[str, Any],
) -> bool:
    """The atomic reopen: ONE statement resets the row and publishes the new process_key.

    Split in two, a reader between the writes would see a `converging` round-1 row still
    carrying the old key, and that run's stragglers would pass the fence. The WHERE on the
    old key makes it a compare-and-set against any other submitter.
    """
    stmt = (
        update(PullRequest)
        .where(
            col(PullRequest.pr_key) == pr_key,
            # Two submitters that read the same finished row: once one has reopened it, the other's
            # stale reopen must lose even where the status it read is back (both read `converging`
            # under a run ended out of band, or the new run already finished the same way).
            col(PullRequest.process_key).is_not_distinct_from(old_process_key),
            # No status test is needed: under the key read, no writer moves a finished row on
            # (`_owned_by` refuses a terminal row, and a run that ended writes nothing).
        )
        .values(**reopen_values(new_process_key, options))
    )
    return (await session.exec(stmt)).rowcount == 1
