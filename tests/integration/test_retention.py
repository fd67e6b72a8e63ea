"""Retention (storage/retention.py, `[retention]`, `convergebot prune`): finished runs past their
time keep their rows with their text cut, old jobs, deliveries and commands go, a batch at a time
from a cursor, and nothing a run still needs or a recent run's text is touched."""

from __future__ import annotations

import json
from datetime import timedelta

from sqlalchemy import update
from sqlmodel import col, select

from storage import commands, escalations, jobs, retention, rounds
from storage.database import Database
from storage.models import Command, Escalation, Job, Round, Run, utcnow

from ..helpers import enroll, finish
from ..serving import make_config, serving
from .test_cli import cli_env
from .test_cli_errors import convergebot

LONG = "The reviewer's explanation, at length. " * 60  # ~2.3 KB, as real review text runs
SETTINGS = retention.Settings(history_days=90, commands_days=30, batch=2)


async def _run(db: Database, key: str, *, ended_days_ago: float | None) -> str:
    """A run of `key` with two rounds of long findings and an answered escalation; finished
    `ended_days_ago` (None: still active)."""
    pk = await enroll(db, key, title=key, url=f"https://github.com/{key.replace('#', '/pull/')}")
    finding = {"thread_id": "T1", "comment_id": 1, "path": "app/core.py", "line": 3, "body": LONG,
               "author": "copilot", "fingerprint": "f1"}
    async with db.session() as s:
        for n in (1, 2):
            await rounds.start(s, key, pk, n, "a" * 40)
            await rounds.update_round(s, key, pk, n, {"findings": json.dumps([finding]), "summary": LONG,
                                                     "instructions": json.dumps([LONG]), "status": "fixed"})
        esc = await escalations.create(s, key, pk, 2, "husk", LONG, "fp")
        assert await escalations.answer(s, esc.id, LONG, "alice")
    if ended_days_ago is not None:
        await finish(db, key, "merged")
        async with db.session() as s:
            await s.exec(update(Run).where(col(Run.process_key) == pk).values(
                ended_at=utcnow() - timedelta(days=ended_days_ago)))
    return pk


async def _texts(db: Database, pk: str) -> list[int]:
    """The lengths of a run's rounds' and escalations' texts."""
    async with db.read_session() as s:
        rs = (await s.exec(select(Round).where(Round.process_key == pk))).all()
        es = (await s.exec(select(Escalation).where(Escalation.process_key == pk))).all()
    return [len(r.findings or "") + len(r.summary or "") + len(r.instructions or "") for r in rs] + [
        len(e.question) + len(e.answer or "") for e in es]


async def _old_rows(db: Database) -> None:
    """Finished jobs (two days old, a failed one of ten days, a queued one of a year), a delivery
    of ten days, and a command of forty days, beside fresh ones."""
    now = utcnow()
    for key, status, age in (("done-old", "done", 2), ("done-new", "done", 0), ("failed-old", "failed", 10),
                             ("failed-new", "failed", 3), ("queued-old", "queued", 365)):
        await jobs.enqueue(db, "sync", key, pr_key="acme/app#1")
        async with db.session() as s:
            await s.exec(update(Job).where(Job.key == key).values(status=status, finished_at=now - timedelta(days=age)))
    assert await commands.claim(db, 1, "acme/app#1", "alice", "answer", "/converge answer x")
    assert await commands.claim(db, 2, "acme/app#1", "alice", "answer", "/converge answer y")
    async with db.session() as s:
        await s.exec(update(Command).where(Command.comment_id == 1).values(created_at=now - timedelta(days=40)))


async def test_old_history_goes_a_batch_at_a_time_and_nothing_current_is_touched(db):
    old = [await _run(db, f"acme/app#{n}", ended_days_ago=100 + n) for n in range(2, 7)]
    recent = await _run(db, "acme/app#7", ended_days_ago=10)
    active = await _run(db, "acme/app#8", ended_days_ago=None)
    await _old_rows(db)
    before = {pk: await _texts(db, pk) for pk in [*old, recent, active]}

    dry = await retention.sweep(db, SETTINGS, utcnow(), dry_run=True)
    assert (dry.runs_compacted, dry.rounds_compacted, dry.escalations_compacted) == (5, 10, 5)
    assert (dry.jobs, dry.commands) == (2, 1) and dry.text_bytes_freed > 5 * 4 * 2000
    assert {pk: await _texts(db, pk) for pk in before} == before, "a dry run changed something"

    first = await retention.sweep(db, SETTINGS, utcnow())
    assert first.runs_compacted == 2  # one batch: the two runs that ended first (the last made)
    assert await _texts(db, old[-1]) != before[old[-1]] and await _texts(db, old[-2]) != before[old[-2]]
    assert await _texts(db, old[0]) == before[old[0]]
    while (await retention.sweep(db, SETTINGS, utcnow())).anything:
        pass
    for pk in old:
        assert all(n < 1000 for n in await _texts(db, pk)), await _texts(db, pk)
    assert await _texts(db, recent) == before[recent] and await _texts(db, active) == before[active]
    # The compacted round keeps where and who: only the text is cut.
    async with db.read_session() as s:
        rnd = (await s.exec(select(Round).where(Round.process_key == old[0], Round.round_no == 1))).one()
    (f,) = json.loads(rnd.findings)
    assert (f["path"], f["line"], f["author"], f["fingerprint"]) == ("app/core.py", 3, "copilot", "f1")
    assert f["body"].startswith(LONG[:100]) and len(f["body"]) <= retention.KEPT_CHARS + 4
    left = {j.key for j in await jobs.list_jobs(db)}
    assert left == {"done-new", "failed-new", "queued-old"}, left
    assert await commands.known(db, [1, 2]) == {2}

    # Again: nothing left to do, and the cursor keeps the walk from reading compacted runs.
    again = await retention.sweep(db, SETTINGS, utcnow(), dry_run=True)
    assert not again.anything, again


async def test_history_days_zero_keeps_the_text_for_ever(db):
    pk = await _run(db, "acme/app#2", ended_days_ago=1000)
    kept = await _texts(db, pk)
    swept = await retention.sweep(db, retention.Settings(history_days=0), utcnow())
    assert swept.runs_compacted == 0 and await _texts(db, pk) == kept


async def test_prune_says_what_would_go_then_removes_it_and_the_page_still_shows_the_round(db_url):
    db = Database(db_url)
    try:
        pk = await _run(db, "acme/app#2", ended_days_ago=200)
        await _old_rows(db)
    finally:
        await db.dispose()
    env = cli_env(db_url)
    code, out, err = await convergebot("prune", "--dry-run", env=env)
    assert code == 0, err
    assert "would remove: 1 runs compacted, 2 rounds compacted, 1 escalations compacted" in out
    assert "2 jobs, 0 deliveries" in out or "2 jobs" in out, out
    code, out, err = await convergebot("prune", env=env)
    assert code == 0 and "removed: 1 runs compacted" in out and "docs/operations.md" in out, (out, err)
    code, out, _ = await convergebot("prune", "--dry-run", env=env)
    assert "would remove: 0 runs compacted, 0 rounds compacted, 0 escalations compacted, 0 commands, 0 jobs" in out

    async with serving(make_config(db_url)) as (rt, http):
        page = await http.get("/prs/acme/app/2")
        assert page.status_code == 200 and LONG[:100] in page.text and "[…]" in page.text
        assert len(page.text) < 40_000
    assert pk
