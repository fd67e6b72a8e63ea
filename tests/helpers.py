"""Small shared steps for storage tests."""

from __future__ import annotations

from sqlalchemy import text

from bot.enrollment import SubmitOptions, submit_pr
from bot.prkey import parse_pr_key
from storage import prs, runs
from storage.database import Database
from storage.statuses import RunState


async def enroll(db: Database, key: str, **opts) -> str:
    result = await submit_pr(db, parse_pr_key(key), SubmitOptions(**opts))
    assert result.outcome == "started", result
    return result.process_key


async def finish(db: Database, key: str, status: str = "converged") -> str:
    """Drive an enrolled PR to a terminal status the way the engine will: fenced, then run completed."""
    view = await prs.get(db, key)
    pk = view.pr.process_key
    assert await prs.fenced_update(db, key, pk, {"status": status})
    assert await runs.end_run(db, pk, RunState.COMPLETED, status)
    return pk


async def install_history(db: Database) -> None:
    """Record every INSERT/UPDATE of pull_requests in pr_history, in commit order, by trigger."""
    async with db.engine.begin() as conn:
        if db.is_postgres:
            await conn.execute(text(
                "CREATE TABLE pr_history (seq SERIAL PRIMARY KEY, pr_key TEXT, status TEXT,"
                " process_key TEXT, current_round INT)"))
            await conn.execute(text(
                "CREATE FUNCTION pr_hist() RETURNS trigger AS $$ BEGIN "
                "INSERT INTO pr_history(pr_key, status, process_key, current_round) "
                "VALUES (NEW.pr_key, NEW.status, NEW.process_key, NEW.current_round); RETURN NEW; "
                "END $$ LANGUAGE plpgsql"))
            await conn.execute(text(
                "CREATE TRIGGER pr_hist AFTER INSERT OR UPDATE ON pull_requests "
                "FOR EACH ROW EXECUTE FUNCTION pr_hist()"))
        else:
            await conn.execute(text(
                "CREATE TABLE pr_history (seq INTEGER PRIMARY KEY AUTOINCREMENT, pr_key TEXT,"
                " status TEXT, process_key TEXT, current_round INT)"))
            for event in ("INSERT", "UPDATE"):
                await conn.execute(text(
                    f"CREATE TRIGGER pr_hist_{event.lower()} AFTER {event} ON pull_requests BEGIN "
                    "INSERT INTO pr_history(pr_key, status, process_key, current_round) "
                    "VALUES (NEW.pr_key, NEW.status, NEW.process_key, NEW.current_round); END"))


async def read_history(db: Database, key: str) -> list[tuple[str, str | None, int]]:
    async with db.engine.connect() as conn:
        rows = await conn.execute(
            text("SELECT status, process_key, current_round FROM pr_history WHERE pr_key = :k ORDER BY seq"),
            {"k": key},
        )
        return [tuple(r) for r in rows]
