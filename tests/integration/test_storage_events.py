"""Events noted in a transaction reach listeners when it commits, and never when it rolls back."""

from __future__ import annotations

import pytest

from storage import escalations, events, rounds
from storage.database import Database
from storage.migrate import migrate


async def test_rounds_and_escalations_are_counted_when_their_transaction_commits_only(tmp_path, db_url):
    heard: list[tuple[str, str]] = []

    def hear(name: str, label: str) -> None:
        heard.append((name, label))

    events.listen(hear)
    db = Database(db_url)
    try:
        await migrate(db)
        with pytest.raises(RuntimeError):
            async with db.session() as s:
                await rounds.start(s, "acme/app#1", "pk-1", 1, "a" * 40, kind="conflict")
                raise RuntimeError("rolled back")
        assert [e for e in heard if e[0] == "round_started"] == []
        async with db.session() as s:
            await rounds.start(s, "acme/app#1", "pk-1", 1, "a" * 40, kind="conflict")
        assert [e for e in heard if e[0] == "round_started"] == [("round_started", "conflict")]
        async with db.session() as s:
            await escalations.create(s, "acme/app#1", "pk-1", 1, "husk", "Rerun it?", "fp")
        assert heard[-1] == ("escalated", "husk")
    finally:
        events.unlisten(hear)
        await db.dispose()
