"""Retention: what history the database keeps, and for how long (docs/operations.md, "Retention").

Nothing a run still needs is touched. What goes, in small batches:

- finished jobs (a day; failed ones a week: their error is worth a look) and webhook deliveries
  (a week: their dedupe window is long over);
- the commands table's rows (each comment's once-only claim) past `commands_days`, long after any
  redelivery or scan could bring the comment again;
- the text of finished runs past `history_days`: their rounds' findings keep their place, count,
  author and fingerprint but only the first `KEPT_CHARS` characters of their text, and likewise
  the rounds' summaries, questions and answers and the escalations' questions and answers. The
  rows stay, so the dashboard's timeline still shows every round of every run.

Compaction walks the runs in the order they ended, from a cursor (`retention:runs`), so each pass
reads only runs it has not compacted yet.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, or_
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from . import cursors, deliveries, jobs
from .database import Database
from .models import Command, Escalation, Round, Run
from .statements import delete_old
from .statuses import RunState

KEPT_CHARS = 200  # of each compacted text
CURSOR = "retention:runs"  # "<ended_at ISO>|<process_key>" of the last run compacted
_CUT = " […]"


@dataclass(frozen=True)
class Settings:
    history_days: float = 90.0  # 0: keep finished runs' text for ever
    commands_days: float = 30.0
    jobs_days: float = 1.0
    failed_jobs_days: float = 7.0
    deliveries_days: float = 7.0
    batch: int = 500


@dataclass
class Swept:
    """What a pass removed (or, in a dry run, would remove)."""

    runs_compacted: int = 0
    rounds_compacted: int = 0
    escalations_compacted: int = 0
    text_bytes_freed: int = 0
    commands: int = 0
    jobs: int = 0
    deliveries: int = 0

    def add(self, other: Swept) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    @property
    def anything(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def cut(text: str | None) -> str | None:
    """`text` kept to its first KEPT_CHARS characters (marked where cut); None stays None."""
    if text is None or len(text) <= KEPT_CHARS:
        return text
    return text[:KEPT_CHARS] + _CUT


def compact_findings(findings: str | None) -> str | None:
    """A round's findings JSON with each finding's text cut: its place (path, line), author,
    thread and fingerprint stay, so the round still says what was found and where. Any other
    JSON list of texts (a round's instructions) has each text cut alike."""
    if not findings:
        return findings
    try:
        items = json.loads(findings)
    except ValueError:
        return cut(findings)
    if not isinstance(items, list):
        return cut(findings)
    return json.dumps([{k: cut(v) if isinstance(v, str) else v for k, v in i.items()} if isinstance(i, dict)
                       else cut(i) if isinstance(i, str) else i for i in items])


def _round_values(r: Round) -> dict[str, Any]:
    return {"findings": compact_findings(r.findings), "summary": cut(r.summary), "question": cut(r.question),
            "instructions": compact_findings(r.instructions), "settled": None}


def _size(*texts: str | None) -> int:
    return sum(len(t) for t in texts if t)


async def _next_runs(s: AsyncSession, before: datetime, after: tuple[datetime, str] | None,
                     limit: int) -> Sequence[tuple[str, datetime, str]]:
    """The next runs to compact, in the order they ended: (key, ended_at, PR key)."""
    stmt = select(Run.process_key, Run.ended_at, Run.pr_key).where(
        col(Run.state) != RunState.ACTIVE, col(Run.ended_at).is_not(None), col(Run.ended_at) < before)
    if after is not None:
        stamp, key = after
        stmt = stmt.where(or_(col(Run.ended_at) > stamp,
                              (col(Run.ended_at) == stamp) & (col(Run.process_key) > key)))
    rows = (await s.exec(stmt.order_by(col(Run.ended_at), col(Run.process_key)).limit(limit))).all()
    return [(k, t, pr) for k, t, pr in rows if t is not None]


def _of_runs(model: Any, runs: Sequence[tuple[str, datetime, str]]) -> Any:
    """The rows of `model` (rounds, escalations) of these runs, through the index that leads
    with the PR's key: by the run's key alone the database read the whole table (the rounds of
    every run ever: 70 ms a batch at 120,000 PRs on SQLite, on the event loop)."""
    return select(model).where(col(model.pr_key).in_(sorted({pr for _, _, pr in runs})),
                               col(model.process_key).in_([k for k, _, _ in runs]))


async def _cuts(s: AsyncSession, runs: Sequence[tuple[str, datetime, str]]
                ) -> tuple[Swept, list[dict[str, Any]], list[dict[str, Any]]]:
    """What compacting these runs cuts: its count, and the new values of each round and
    escalation whose text gets shorter (with `row_id`, for one executemany per table)."""
    swept = Swept(runs_compacted=len(runs))
    cut_rounds, cut_escs = [], []
    for r in (await s.exec(_of_runs(Round, runs))).all():
        values = _round_values(r)
        freed = _size(r.findings, r.summary, r.question, r.instructions, r.settled) - _size(*values.values())
        if freed > 0:
            swept.rounds_compacted += 1
            swept.text_bytes_freed += freed
            cut_rounds.append({"row_id": r.id, **values})
    for e in (await s.exec(_of_runs(Escalation, runs))).all():
        question, answer = cut(e.question) or "", cut(e.answer)
        freed = _size(e.question, e.answer) - _size(question, answer)
        if freed > 0:
            swept.escalations_compacted += 1
            swept.text_bytes_freed += freed
            cut_escs.append({"row_id": e.id, "question": question, "answer": answer})
    return swept, cut_rounds, cut_escs


def _read_cursor(text: str | None) -> tuple[datetime, str] | None:
    if not text:
        return None
    stamp, _, key = text.partition("|")
    try:
        return datetime.fromisoformat(stamp), key
    except ValueError:
        return None  # a cursor this version cannot read: start over (compaction is idempotent)


async def compact_runs(db: Database, before: datetime, limit: int) -> Swept:
    """Compact the text of up to `limit` runs that ended before `before`, in one transaction with
    the cursor's move (a crash compacts the same runs again: cutting cut text changes nothing)."""
    async with db.session() as s:
        after = _read_cursor((await cursors.load(db, CURSOR)).get(CURSOR))
        runs = await _next_runs(s, before, after, limit)
        if not runs:
            return Swept()
        swept, cut_rounds, cut_escs = await _cuts(s, runs)
        # One executemany per table, on the tables themselves: an ORM update per row made the
        # session match each against every row it had loaded (quadratic in the batch; a
        # 500-run batch held the event loop for seconds).
        for table, rows in ((Round.__table__, cut_rounds), (Escalation.__table__, cut_escs)):
            if rows:
                await s.exec(table.update().where(table.c.id == bindparam("row_id")), params=rows)
        last_key, last_at, _ = runs[-1]
        await cursors.save_in(s, {CURSOR: f"{last_at.isoformat()}|{last_key}"})
    return swept


async def sweep(db: Database, settings: Settings, now: datetime, *, dry_run: bool = False,
                passes: int = 1) -> Swept:
    """Up to `passes` batches of each kind of history past its time (a dry run counts all of it
    and compacts nothing). The leader runs one pass a poll tick; `convergebot prune` runs until
    nothing is left."""
    total = Swept()
    days = timedelta(days=1)
    for _ in range(passes):
        swept = Swept()
        if settings.history_days > 0:
            before = now - settings.history_days * days
            swept.add(await (_compact_all(db, before, settings.batch) if dry_run
                             else compact_runs(db, before, settings.batch)))
        n = settings.batch
        swept.jobs += await jobs.prune(db, now - settings.jobs_days * days, now - settings.failed_jobs_days * days,
                                       limit=n, dry_run=dry_run)
        swept.deliveries += await deliveries.prune(db, now - settings.deliveries_days * days, limit=n, dry_run=dry_run)
        swept.commands += await delete_old(db, Command, col(Command.id),
                                           col(Command.created_at) < now - settings.commands_days * days,
                                           limit=n, dry_run=dry_run)
        total.add(swept)
        if dry_run or not swept.anything:
            break
    return total


async def _compact_all(db: Database, before: datetime, batch: int) -> Swept:
    """A dry run's compaction: every run past its time, read a batch at a time, nothing written."""
    total = Swept()
    async with db.read_session() as s:
        after = _read_cursor((await cursors.load(db, CURSOR)).get(CURSOR))
        while runs := await _next_runs(s, before, after, batch):
            total.add((await _cuts(s, runs))[0])
            after = (runs[-1][1], runs[-1][0])  # (ended_at, key)
    return total
