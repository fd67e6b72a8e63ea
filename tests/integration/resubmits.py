"""A resubmit cut short, and what the database may hold after it: the PR as it was, or the PR
reopened under one consistent active run, never a ghost (a run marked active that no row points
at, which nothing would drive or end)."""

from __future__ import annotations

from sqlalchemy import event, exists
from sqlmodel import col, select

from storage import prs, runs
from storage.database import Database
from storage.models import Adjudication, Escalation, PullRequest, Run, utcnow

from ..helpers import enroll, finish

# What a resubmit writes, in order: the reopen's compare-and-set, the new run, the open
# escalations made stale, the adjudications revoked, the old run's end. A fault or a kill is
# tried after each; a write added to the resubmit must be counted here to be tried too.
RESUBMIT_WRITES = 5
WRITES = ("INSERT", "UPDATE", "DELETE")


def is_write(statement: str) -> bool:
    return statement.lstrip().split(None, 1)[0].upper() in WRITES


async def finished_with_questions(db: Database, key: str) -> str:
    """A PR whose run converged with an escalation still open and an answer remembered (all of
    which a resubmit changes); the finished run's key."""
    pk = await enroll(db, key)
    now = utcnow()
    async with db.session() as s:
        s.add(Escalation(pr_key=key, process_key=pk, round_no=1, kind="stalled", question="q?",
                         fingerprint="f1", status="open", asked_at=now))
        s.add(Adjudication(pr_key=key, fingerprint="f0", answer="decline", adjudicated_by="m",
                           adjudicated_at=now))
    return await finish(db, key)


async def ghost_runs(db: Database) -> list[str]:
    """Runs marked active that no PR row points at."""
    async with db.read_session() as s:
        rows = await s.exec(select(Run.process_key).where(
            col(Run.state) == "active",
            ~exists().where(col(PullRequest.process_key) == col(Run.process_key))))
        return list(rows)


async def resubmit_state(db: Database, key: str, old: str) -> str:
    """"old" (the PR as `finished_with_questions` left it) or "reopened" (the row on one new
    active run, the old one ended, its escalation stale, its answer revoked); anything else fails."""
    assert await ghost_runs(db) == []
    view = await prs.get(db, key)
    assert view is not None
    all_runs = {r.process_key: r.state for r in await runs.runs_for(db, key)}
    async with db.read_session() as s:
        escalations = list(await s.exec(select(Escalation.status)))
        revoked = [a is not None for a in await s.exec(select(Adjudication.invalidated_at))]
    found = (view.pr.status, view.pr.process_key, all_runs, escalations, revoked)
    if view.pr.process_key == old:
        assert found == ("converged", old, {old: "completed"}, ["open"], [False]), found
        return "old"
    new = view.pr.process_key
    assert found == ("converging", new, {old: "completed", new: "active"}, ["stale"], [True]), found
    assert (view.pr.current_round, view.run_state) == (1, "active")
    return "reopened"


class InjectedFault(RuntimeError):
    """Raised by `Writes` once the write it was to fail after has run."""


class Writes:
    """The INSERTs, UPDATEs and DELETEs `db` runs, counted; with `fail_after`, InjectedFault is
    raised after that many (the last one ran, its transaction had not committed)."""

    def __init__(self, db: Database, *, fail_after: int | None = None) -> None:
        self.engine = db.engine.sync_engine
        self.fail_after = fail_after
        self.seen: list[str] = []
        event.listen(self.engine, "after_cursor_execute", self._after)

    def _after(self, conn, cursor, statement, parameters, context, executemany) -> None:
        if is_write(statement):
            self.seen.append(statement)
            if len(self.seen) == self.fail_after:
                raise InjectedFault(f"after write {self.fail_after}: {statement.splitlines()[0]}")

    def remove(self) -> None:
        event.remove(self.engine, "after_cursor_execute", self._after)
