"""Read sessions that cannot write: the execution option that marks a read session's connection,
and the engine hook that refuses anything but a read sent through one (`ReadOnlyViolation`)
before it reaches the database."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection
from sqlalchemy.engine.interfaces import DBAPICursor, ExecutionContext
from sqlalchemy.ext.asyncio import AsyncEngine

# The execution option that marks a read session's connection (see `Database.read_session`).
READ_ONLY = "convergebot_read_only"


class ReadOnlyViolation(RuntimeError):
    """A statement other than a read was sent through a read session."""


_READS = ("select", "with", "show", "pragma", "explain", "begin", "savepoint", "release", "rollback", "commit")


def install_read_only_guard(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "before_cursor_execute")
    def _refuse_writes(conn: Connection, _cursor: DBAPICursor, statement: str, _params: Any,
                       _context: ExecutionContext | None, _executemany: bool) -> None:
        if not conn.get_execution_options().get(READ_ONLY):
            return
        head = statement.lstrip().split(None, 1)[0].lower() if statement.strip() else ""
        if (head not in _READS or (head == "with" and _writes(statement))
                or (head == "pragma" and "=" in statement)):  # a pragma that sets, e.g. journal_mode
            raise ReadOnlyViolation(f"a read session cannot run {statement.strip()[:60]!r}")


def _writes(statement: str) -> bool:
    # A CTE may front an INSERT/UPDATE/DELETE: look past it.
    lowered = statement.lower()
    return any(f" {verb} " in f" {lowered} " for verb in ("insert", "update", "delete"))
