"""Several workers finding one run over its write budget at once make one runaway escalation."""

from __future__ import annotations

import asyncio
import contextlib

from bot.config import Config
from bot.engine import write_budget as budget
from bot.engine.write_budget import RUNAWAY, pause_runaway
from bot.runtime.context import Runtime
from storage import escalations, jobs, prs

from ..helpers import enroll


async def test_workers_pausing_one_run_at_once_escalate_it_once(db, monkeypatch):
    key = "o/r#1"
    pk = await enroll(db, key)
    rt = Runtime(Config(), db, github=None)
    # Each transaction's look for an open runaway waits (a second at most) for another one to
    # have looked too: two looks that can both happen before either commits do, every time. With
    # the look made under the PR's row lock, the second only looks once the first committed.
    look, looked, two_looked = budget._open_runaway, [], asyncio.Event()

    async def look_together(session, pr_key):
        found = await look(session, pr_key)
        looked.append(found)
        if len(looked) >= 2:
            two_looked.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(two_looked.wait(), 1.0)
        return found

    monkeypatch.setattr(budget, "_open_runaway", look_together)
    # Each worker ran an effect of the run, found it over budget and pauses it, all at once.
    await asyncio.gather(*(pause_runaway(rt, key, pk, "9 comments within the hour (budget 4)")
                           for _ in range(4)))
    opened = [e for e in await escalations.open_for(db, key) if e.kind == RUNAWAY]
    assert len(opened) == 1
    assert (await prs.get(db, key)).pr.status == "escalated"
    comments = [j for j in await jobs.list_jobs(db) if j.kind == "effect" and '"comment"' in j.payload]
    assert len(comments) == 1  # one escalation comment queued, not one per worker
