"""Small shared steps for tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from sqlalchemy import text

from bot.engine.submit import SubmitOptions, submit_pr
from storage import prs, runs
from storage.database import Database
from storage.keys import parse_pr_key
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


async def until(what: str, check: Callable[[], Awaitable[Any]], timeout: float = 30.0, every: float = 0.05) -> Any:
    """`check()`'s first truthy answer, asked every `every` seconds; fails after `timeout`."""
    deadline = time.monotonic() + timeout
    while not (value := await check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(every)
    return value


async def lock_waiter(db: Database) -> bool:
    """PostgreSQL: whether a backend of `db`'s database is waiting for a lock (a write held
    behind another transaction's row lock), asked on a connection of its own."""
    async with db.engine.connect() as conn:
        waiting = await conn.execute(text(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'"))
        return waiting.scalar() > 0


async def polled(rt) -> bool:
    """Whether the runtime's poller has ended its start-up tick (led or not)."""
    return rt.health.last_poll_at is not None


def app_private_key(directory: Path) -> Path:
    """A fresh GitHub App private key as a PEM file in `directory` (the simulator does not check
    the App's JWT signature, only that one is sent)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = directory / "app.pem"
    pem.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
    return pem


def free_port() -> int:
    """A port free on 127.0.0.1 now (a process started with it binds it soon after)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
