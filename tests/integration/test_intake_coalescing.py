"""Coalescing jobs with the news that wakes them, against jobs already running, on both backends.

A delivery's sync (or a ref's sync_ref) coalesces into one of its kind still queued for the
same PR (or ref): that one reads GitHub later, news included. One a worker already runs may have
read GitHub before the news, so the news needs a job of its own. The intake queues through
`jobs.queue_wakes` (SQLAlchemy Core: PostgreSQL, or SQLite when another process holds the lock)
or `jobs.queue_wakes_sqlite` (plain sqlite3, a SQLite file's usual way): both are held to it, as
are `enqueue_in` (a handler's follow-ups) and `enqueue_per_pr` (the poller's re-reads). A job
folded into is brought forward to the sooner of the two times, never put off.
"""

from __future__ import annotations

import json

import pytest

from bot.engine import outbox
from bot.intake.webhook import intake
from storage import jobs
from storage.keys import parse_pr_key
from storage.models import Job
from storage.statuses import SameWork

from ..helpers import enroll, polled, until
from ..openapi import webhook_examples
from ..serving import make_config, serving
from .test_webhooks import signed

PUSHED = webhook_examples("pull_request", action="synchronize")[0]
KEY = parse_pr_key(f"{PUSHED['repository']['full_name']}#{PUSHED['number']}")
SHA = "a" * 40
STATUS = {"sha": SHA, "state": "success", "repository": {"full_name": "octo/repo"}}

# (event, payload, the job kind it queues, what makes two of them one work)
NEWS = {
    "push to a PR": ("pull_request", PUSHED, "sync"),
    "a status of a sha": ("status", STATUS, "sync_ref"),
}


def _of_kind(found: list[Job], kind: str) -> list[tuple[str, str]]:
    return [(j.key, j.status) for j in found if j.kind == kind]


@pytest.mark.parametrize("news", NEWS, ids=["sync", "sync_ref"])
async def test_news_arriving_while_its_sync_runs_queues_one_follow_up(db_url, news):
    """A worker runs the PR's sync (or the sha's sync_ref) when a delivery about it arrives: the
    delivery queues a follow-up instead of folding into the running job, and a second delivery
    folds into that follow-up."""
    event, payload, kind = NEWS[news]
    body = json.dumps(payload).encode()
    config = make_config(db_url, jobs={"workers": 1, "idle_poll_seconds": 3600})
    async with serving(config) as (rt, http):
        await until("the poller's start-up tick", lambda: polled(rt))
        writer, woken = intake(rt), []
        writer.wake = woken.append  # the workers stay asleep: the jobs stay where the test looks

        first = await http.post("/webhook", content=body, headers=signed(body, event, "news-1"))
        assert first.status_code == 202, first.text
        [(queued_key, _)] = _of_kind(await jobs.list_jobs(rt.db), kind)
        # Due once its debounce is over: a worker takes it.
        running = await until("the job due", lambda: jobs.claim(rt.db, "a-worker", 300, kinds=(kind,)))
        assert running.key == queued_key

        second = await http.post("/webhook", content=body, headers=signed(body, event, "news-2"))
        assert second.status_code == 202, second.text
        now = _of_kind(await jobs.list_jobs(rt.db), kind)
        assert len(now) == 2 and (queued_key, "running") in now, now
        [follow_up] = [key for key, status in now if status == "queued"]

        third = await http.post("/webhook", content=body, headers=signed(body, event, "news-3"))
        assert third.status_code == 202, third.text
        assert _of_kind(await jobs.list_jobs(rt.db), kind) == now  # folded into the follow-up
        assert follow_up != queued_key and len(woken) == 2  # one wake per job queued


WRITERS = ["core", "plain"]


async def _queue(db, writer: str, wakes: list[dict]):
    if writer == "plain":
        if db.is_postgres:
            pytest.skip("plain sqlite3: a SQLite file's writer")
        return await db.write(jobs.queue_wakes, wakes, plain=jobs.queue_wakes_sqlite)
    return await db.write(jobs.queue_wakes, wakes)


def _sync(tag: str, delay: float = 0.0) -> dict:
    return dict(kind="sync", key=f"sync:{KEY}:{tag}", pr_key=KEY, payload={}, delay_seconds=delay,
                same_as=SameWork.PR)


def _sync_ref(tag: str, delay: float = 0.0) -> dict:
    return dict(kind="sync_ref", key=f"sync_ref:octo/repo:{tag}", pr_key=None,
                payload={"repo": "octo/repo", "sha": SHA, "branch": None}, delay_seconds=delay,
                same_as=SameWork.PAYLOAD)


@pytest.mark.parametrize("writer", WRITERS)
async def test_the_batch_writers_queue_a_follow_up_beside_a_running_job(db, writer):
    """Each of the intake's two writers: a wake whose job of the same work is running queues
    one of its own; one whose job is still queued folds into it."""
    await _queue(db, writer, [_sync("a", 60), _sync_ref("a", 60)])
    assert await jobs.claim(db, "a-worker", 300) is None  # not due for a minute
    assert await _queue(db, writer, [_sync("b"), _sync_ref("b")]) is not None  # brought forward
    taken = [await jobs.claim(db, "a-worker", 300) for _ in range(2)]
    assert sorted(j.key for j in taken if j is not None) == [f"sync:{KEY}:a", "sync_ref:octo/repo:a"]

    assert await _queue(db, writer, [_sync("c", 60), _sync_ref("c", 60)]) is not None  # new rows
    # Later than the queued ones: folded into them, nothing brought forward, no one to wake.
    assert await _queue(db, writer, [_sync("d", 90), _sync_ref("d", 90)]) is None
    found = {j.key: j.status for j in await jobs.list_jobs(db)}
    assert found == {f"sync:{KEY}:a": "running", "sync_ref:octo/repo:a": "running",
                     f"sync:{KEY}:c": "queued", "sync_ref:octo/repo:c": "queued"}


async def test_a_later_enqueue_does_not_put_off_a_sync_queued_sooner(db):
    """A sync wanted now, then news whose sync is debounced: the one queued stays due now,
    whichever way the second is queued (a handler's `enqueue_in`, the intake's batch)."""
    first, created = await jobs.enqueue(db, "sync", f"sync:{KEY}:now", pr_key=KEY, same_as=SameWork.PR)
    assert created
    due = (await jobs.get_job(db, first)).run_at
    assert await jobs.enqueue(db, "sync", f"sync:{KEY}:later", pr_key=KEY, same_as=SameWork.PR,
                              delay_seconds=60) == (first, False)
    assert await db.write(jobs.queue_wakes, [_sync("batch", 60)]) is None
    assert (await jobs.get_job(db, first)).run_at == due
    claimed = await jobs.claim(db, "a-worker", 300)
    assert claimed is not None and claimed.id == first


async def test_a_check_run_update_due_sooner_is_not_put_off_by_a_longer_settle(db):
    """A waiting check-run update is brought forward by a change that wants it sooner, and left
    as it is by one that would want it later."""
    await enroll(db, KEY)
    async with db.session() as s:
        assert await outbox.check_run(s, KEY, settle_seconds=0)
    [update] = [j for j in await jobs.list_jobs(db) if j.kind == "effect"]
    async with db.session() as s:
        assert not await outbox.check_run(s, KEY, settle_seconds=600)
    assert (await jobs.get_job(db, update.id)).run_at == update.run_at
    claimed = await jobs.claim(db, "a-worker", 300)
    assert claimed is not None and claimed.id == update.id


async def test_the_pollers_re_read_is_queued_beside_a_running_sync(db):
    """The poller queues a PR's re-read unless one is queued: a sync a worker already runs may
    have read GitHub before what the re-read would find."""
    await jobs.enqueue(db, "sync", f"sync:{KEY}:running", pr_key=KEY, same_as=SameWork.PR)
    assert (await jobs.claim(db, "a-worker", 300)).key == f"sync:{KEY}:running"

    async def tick(n: int) -> int:
        async with db.session() as s:
            return await jobs.enqueue_per_pr(s, "sync", [KEY], lambda k: f"poll:{k}:{n}")

    assert await tick(1) == 1
    assert await tick(2) == 0  # the one queued is the re-read
    assert sorted((j.key, j.status) for j in await jobs.list_jobs(db)) == [
        (f"poll:{KEY}:1", "queued"), (f"sync:{KEY}:running", "running")]
