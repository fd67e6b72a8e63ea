"""One leader per database: the poller (and every periodic duty) runs on one replica at a
time, and another takes over when the leader's connection is gone."""

from __future__ import annotations

from sqlalchemy import text

from bot.intake.poller import Poller
from bot.runtime.context import Runtime
from bot.runtime.leadership import LEADER_LOCK, Leadership
from storage.database import Database
from tests.helpers import until
from tests.serving import make_config


async def _nobody_leads(db: Database) -> bool:
    """Whether no backend holds the leader's lock."""
    async with db.engine.connect() as conn:
        return (await conn.execute(text(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = :lo AND granted"),
            {"lo": LEADER_LOCK & 0xFFFFFFFF})).scalar_one() == 0


async def test_one_replica_leads_and_another_takes_over_when_its_connection_dies(db_url):
    first, second = Database(db_url), Database(db_url)
    a, b = Leadership(first), Leadership(second)
    try:
        if not first.is_postgres:
            # A SQLite file serves one process (serve refuses a second): it always leads.
            assert await a.holds() and await b.holds()
            return
        assert await a.holds()
        assert not await b.holds()
        assert await a.holds(), "the leader keeps leading while its connection answers"
        # The leader dies without a word (SIGKILL): its connection is ended from outside. (pg_locks
        # shows a bigint advisory key as classid, its high half, and objid, its low half.)
        async with second.engine.connect() as conn:
            ended = (await conn.execute(text(
                "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' "
                "AND objid = :lo AND pid <> pg_backend_pid()"), {"lo": LEADER_LOCK & 0xFFFFFFFF})).scalars().all()
        assert ended == [True]
        # pg_terminate_backend only signals the backend: the lock goes when the backend has exited.
        await until("the dead leader's backend to exit", lambda: _nobody_leads(second))
        assert await b.holds(), "the next replica to ask takes over"
        assert not await a.holds(), "the old leader finds its connection gone and follows"
        await b.release()
        assert await a.holds(), "a release hands over at once"
    finally:
        await a.release()
        await b.release()
        await first.dispose()
        await second.dispose()


async def test_only_the_leaders_poller_ticks(db_url):
    first, second = Database(db_url), Database(db_url)
    try:
        config = make_config(db_url)
        polls = [Poller(Runtime(config, db, None)) for db in (first, second)]
        for _ in range(3):
            for p in polls:
                await p.tick()
        ticks = [p.ticks for p in polls]
        if first.is_postgres:
            assert ticks == [3, 0]
            assert [p.rt.health.leader for p in polls] == [True, False]
        else:
            assert ticks == [3, 3]
        # A follower's tick is a healthy poll all the same (readiness does not fail it).
        assert all(p.rt.health.last_poll_at is not None and p.rt.health.last_poll_error is None for p in polls)
    finally:
        for p in polls:
            await p.rt.leadership.release()
        await first.dispose()
        await second.dispose()

