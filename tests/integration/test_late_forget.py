"""`/converge forget` handed over late forgets the answers given by the time it was written, and
keeps one given since: its author never saw that answer."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import update
from sqlmodel import col

from bot.engine.commands import execute
from bot.rules.commands import Command
from storage import adjudications
from storage.keys import parse_pr_key
from storage.models import Adjudication, utcnow

from ..helpers import enroll

KEY = parse_pr_key("acme/app#1")


async def test_a_late_forget_keeps_the_answers_given_after_it_was_written(bare_runtime, db):
    rt = bare_runtime()
    await enroll(db, KEY)
    written = utcnow() - timedelta(hours=2)
    async with db.session() as s:
        await adjudications.record(s, KEY, "seen", "Keep it.", "maint")
        await adjudications.record(s, KEY, "since", "Rename it.", "alice")
    async with db.session() as s:
        for fingerprint, at in (("seen", written - timedelta(hours=1)), ("since", written + timedelta(hours=1))):
            await s.exec(update(Adjudication).where(col(Adjudication.fingerprint) == fingerprint)
                         .values(adjudicated_at=at))

    assert await execute(rt, KEY, Command("forget"), "maint", written) == (True, "Forgot 1 remembered answer(s).")
    assert [a.fingerprint for a in await adjudications.live_for(db, KEY)] == ["since"]
    # Written now (or given from the CLI): every answer so far is forgotten.
    assert await execute(rt, KEY, Command("forget"), "maint") == (True, "Forgot 1 remembered answer(s).")
    assert await adjudications.live_for(db, KEY) == []
