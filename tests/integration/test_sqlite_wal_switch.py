"""Putting a new SQLite file in WAL mode while another connection writes to it (several processes
starting on one file together): SQLite refuses the switch at once, without its busy wait, so
`ensure_wal` retries within its patience, and gives up once the patience is spent."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from pathlib import Path

import pytest

from storage import sqlite as sqlite_module
from storage.sqlite import ensure_wal


def _writer(path: Path) -> sqlite3.Connection:
    """Another connection in the middle of a write (it holds the file's RESERVED lock)."""
    with contextlib.closing(sqlite3.connect(path)) as setup:
        setup.execute("CREATE TABLE t (x)")
        setup.commit()
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO t VALUES (1)")
    return writer


def _mode(path: Path) -> str:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()


def test_a_switch_refused_while_another_connection_writes_is_retried_once_it_committed(tmp_path, monkeypatch):
    path = tmp_path / "new.db"
    writer = _writer(path)
    sleep, retries = time.sleep, []

    def retry_after_the_commit(seconds: float) -> None:
        # The first retry's pause is where the other writer commits.
        if not retries:
            writer.execute("COMMIT")
        retries.append(seconds)
        sleep(seconds)

    monkeypatch.setattr(sqlite_module.time, "sleep", retry_after_the_commit)
    try:
        ensure_wal(path, patience=30)
    finally:
        writer.close()
    assert retries and _mode(path) == "wal"


def test_a_switch_still_refused_when_the_patience_is_spent_fails(tmp_path, monkeypatch):
    path = tmp_path / "new.db"
    writer = _writer(path)
    sleep, started = time.sleep, time.monotonic()

    def held_for_two_seconds(seconds: float) -> None:
        # The writer holds on well past the patience; it lets go after two seconds at last (so a
        # wait with no deadline ends, and ends in WAL mode, instead of hanging the test).
        if time.monotonic() - started > 2 and writer.in_transaction:
            writer.execute("COMMIT")
        sleep(seconds)

    monkeypatch.setattr(sqlite_module.time, "sleep", held_for_two_seconds)
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            ensure_wal(path, patience=0.3)
        assert time.monotonic() - started < 2  # given up at the patience, not at the commit
    finally:
        writer.close()
    assert _mode(path) != "wal"
