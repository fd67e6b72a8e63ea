"""Group commit of /webhook (bot/intake/batch.py), over real HTTP, on both backends.

Deliveries arriving together are recorded in one transaction and each is answered only after
that transaction committed: all or none of a batch is recorded, a failed batch answers every
request in it with a 5xx, and duplicates are recognised inside a batch as across batches.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from sqlmodel import select

from bot.intake.routing import SYNC_DEBOUNCE_SECONDS
from bot.intake.webhook import intake, receive_webhook
from storage import jobs
from storage.models import WebhookDelivery

from ..helpers import polled, until
from ..openapi import webhook_examples
from ..serving import make_config, serving
from .test_webhooks import signed


def command(comment_id: int, number: int = 7) -> bytes:
    """An issue_comment that wakes exactly one job of its own: `cmd:<comment id>`."""
    return json.dumps({
        "action": "created",
        "issue": {"number": number, "pull_request": {"url": f"https://api.github.com/repos/octo/repo/pulls/{number}"}},
        "comment": {"id": comment_id, "body": "/converge status", "user": {"login": "alice", "type": "User"}},
        "repository": {"full_name": "octo/repo"},
        "sender": {"login": "alice", "type": "User"},
    }).encode()


def config(db_url: str, *, wait: float, max_batch: int = 64):
    # One worker that never idles into a claim on its own: the jobs stay where the test looks.
    return make_config(db_url, jobs={"workers": 1, "idle_poll_seconds": 3600},
                       server={"webhook_batch_wait_seconds": wait, "webhook_batch_max": max_batch})


async def recorded(db) -> dict[str, str]:
    async with db.session() as s:
        return {d.delivery_id: d.outcome for d in await s.exec(select(WebhookDelivery))}


async def command_jobs(db) -> list[str]:
    return sorted(j.key for j in await jobs.list_jobs(db) if j.kind == "command")


async def post_all(http, deliveries: list[tuple[str, int]]) -> list:
    """POST each (delivery id, comment id) at once, each on its own request."""
    async def one(delivery: str, comment_id: int):
        body = command(comment_id)
        return await http.post("/webhook", content=body, headers=signed(body, "issue_comment", delivery))

    return await asyncio.gather(*(one(d, c) for d, c in deliveries))


class _Answer:
    def __init__(self, messages: list[dict]) -> None:
        self.status_code = messages[0]["status"]
        self._body = messages[1]["body"]

    def json(self) -> dict:
        return json.loads(self._body)


async def through_endpoint(rt, body: bytes, event: str, delivery: str, *, sent: asyncio.Event | None = None) -> _Answer:
    """One delivery through the /webhook endpoint itself, its body sent once `sent` is set."""
    headers = [(k.lower().encode(), v.encode()) for k, v in signed(body, event, delivery).items()]
    messages: list[dict] = []

    async def receive() -> dict:
        if sent is not None:
            await sent.wait()
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict) -> None:
        messages.append(message)

    await receive_webhook(rt, {"type": "http", "headers": headers}, receive, send)
    return _Answer(messages)


async def together(rt, deliveries: list[tuple[bytes, str, str]]) -> list[_Answer]:
    """(body, event, delivery id) each on its own request, all of them in hand before any body
    is read: a batch waits for every request in hand, so they share one (up to its maximum)."""
    writer, sent = intake(rt), asyncio.Event()
    before = writer._in_hand
    answers = [asyncio.create_task(through_endpoint(rt, *d, sent=sent)) for d in deliveries]

    async def in_hand() -> bool:
        return writer._in_hand == before + len(deliveries)

    await until("every request in hand", in_hand, every=0.01)
    sent.set()
    return await asyncio.gather(*answers)


async def commands_together(rt, deliveries: list[tuple[str, int]]) -> list[_Answer]:
    return await together(rt, [(command(c), "issue_comment", d) for d, c in deliveries])


async def test_concurrent_deliveries_are_each_recorded_once_with_their_jobs(db_url):
    n = 40
    async with serving(config(db_url, wait=0.05)) as (rt, http):
        sent = [(f"d-{i}", 1000 + i) for i in range(n)]
        answers = await post_all(http, sent)

        assert [r.status_code for r in answers] == [202] * n, [r.text for r in answers if r.status_code != 202]
        assert all(r.json()["outcome"] == "queued" for r in answers)
        assert await recorded(rt.db) == {d: "queued" for d, _ in sent}
        assert await command_jobs(rt.db) == sorted(f"cmd:{c}" for _, c in sent)
        # Grouped: fewer transactions than deliveries.
        writer = intake(rt)
        assert writer.largest_batch > 1 and writer.batches < n, (writer.batches, writer.largest_batch)

        # Each again, at once: every one is a duplicate, and nothing more is queued.
        again = await post_all(http, sent)
        assert [(r.status_code, r.json()["outcome"]) for r in again] == [(200, "duplicate")] * n
        assert len(await recorded(rt.db)) == n
        assert await command_jobs(rt.db) == sorted(f"cmd:{c}" for _, c in sent)


async def test_a_duplicate_inside_one_batch_is_recognised(db_url):
    # The batch closes when its 4 deliveries are in (the wait is only an upper bound).
    async with serving(config(db_url, wait=1.0, max_batch=4)) as (rt, _http):
        writer = intake(rt)
        answers = await commands_together(rt, [("a", 1), ("b", 2), ("a", 1), ("c", 3)])
        assert writer.batches == 1 and writer.largest_batch == 4
        by_status = sorted((r.status_code, r.json()["delivery_id"], r.json()["outcome"]) for r in answers)
        assert by_status == [(200, "a", "duplicate"), (202, "a", "queued"), (202, "b", "queued"),
                             (202, "c", "queued")]
        assert sorted(await recorded(rt.db)) == ["a", "b", "c"]
        assert await command_jobs(rt.db) == ["cmd:1", "cmd:2", "cmd:3"]

        # And across batches: "a" again, next to new ones, in the next batch.
        answers = await commands_together(rt, [("a", 1), ("d", 4), ("e", 5), ("d", 4)])
        assert writer.batches == 2
        by_status = sorted((r.status_code, r.json()["delivery_id"], r.json()["outcome"]) for r in answers)
        assert by_status == [(200, "a", "duplicate"), (200, "d", "duplicate"), (202, "d", "queued"),
                             (202, "e", "queued")]
        assert sorted(await recorded(rt.db)) == ["a", "b", "c", "d", "e"]
        assert await command_jobs(rt.db) == ["cmd:1", "cmd:2", "cmd:3", "cmd:4", "cmd:5"]


async def test_a_failed_batch_answers_every_request_5xx_records_none_and_a_retry_succeeds(db_url, monkeypatch):
    sent = [(f"f-{i}", 2000 + i) for i in range(6)]
    poison = "cmd:2003"  # the 4th delivery's job: the deliveries are written, then undone
    queue = jobs._queue  # what both of the batch's writers queue its jobs with (SQLite's plain one too)

    def failing(run, wakes):
        queue(run, [w for w in wakes if w["key"] != poison])
        if any(w["key"] == poison for w in wakes):
            raise RuntimeError("injected: the batch's transaction fails")

    async with serving(config(db_url, wait=1.0, max_batch=len(sent))) as (rt, http):
        writer = intake(rt)
        monkeypatch.setattr(jobs, "_queue", failing)
        answers = await commands_together(rt, sent)
        assert writer.batches == 1 and writer.largest_batch == len(sent)
        assert [r.status_code for r in answers] == [503] * len(sent)
        assert all("could not be recorded" in r.json()["error"] for r in answers)
        assert await recorded(rt.db) == {}
        assert await command_jobs(rt.db) == []

        # The redeliveries (same ids) once the store works again: all accepted, each once.
        monkeypatch.setattr(jobs, "_queue", queue)
        answers = await post_all(http, sent)
        assert [r.status_code for r in answers] == [202] * len(sent)
        assert await recorded(rt.db) == {d: "queued" for d, _ in sent}
        assert await command_jobs(rt.db) == sorted(f"cmd:{c}" for _, c in sent)
        # The server and its intake are still fine for what comes next.
        answers = await post_all(http, [("g-1", 3001)])
        assert answers[0].status_code == 202


@pytest.mark.parametrize("wait", [0.0])
async def test_without_a_wait_deliveries_still_go_through(db_url, wait):
    """wait 0: a batch is what queued while the previous one was written."""
    async with serving(config(db_url, wait=wait)) as (rt, http):
        sent = [(f"z-{i}", 4000 + i) for i in range(20)]
        answers = await post_all(http, sent)
        assert [r.status_code for r in answers] == [202] * len(sent)
        assert await recorded(rt.db) == {d: "queued" for d, _ in sent}
        assert await command_jobs(rt.db) == sorted(f"cmd:{c}" for _, c in sent)


async def test_a_burst_about_one_pr_wakes_the_workers_once(db_url):
    """Five pushes to one PR in a batch queue one sync and one wake, for when it falls due; the
    next batch only coalesces into that sync and wakes nothing; a command wakes at once."""
    body = json.dumps(webhook_examples("pull_request", action="synchronize")[0]).encode()
    async with serving(config(db_url, wait=1.0, max_batch=5)) as (rt, http):
        writer, woken = intake(rt), []
        writer.wake = woken.append  # what the intake tells the workers (the poller wakes them too)

        # The start-up tick wakes the workers when it ends: on a loaded machine it could end
        # after the first sync fell due, and the worker would take it before the next batch.
        await until("the poller's start-up tick", lambda: polled(rt))

        async def pushes(prefix: str) -> None:
            answers = await together(rt, [(body, "pull_request", f"{prefix}-{i}") for i in range(5)])
            assert [r.status_code for r in answers] == [202] * 5

        await pushes("a")
        assert writer.batches == 1
        syncs = [j for j in await jobs.list_jobs(rt.db) if j.kind == "sync"]
        assert len(syncs) == 1 and len(woken) == 1
        assert 0 < woken[0] <= SYNC_DEBOUNCE_SECONDS  # when the debounced sync falls due

        await pushes("b")
        assert writer.batches == 2 and woken == woken[:1]
        assert len([j for j in await jobs.list_jobs(rt.db) if j.kind == "sync"]) == 1

        answers = await post_all(http, [("c-1", 9001)])
        assert answers[0].status_code == 202 and woken[1:] == [0.0]


@pytest.mark.parametrize("fails", [False, True], ids=["written", "failed"])
async def test_a_request_cancelled_while_its_batch_waits_leaves_the_rest_of_the_batch_answered(db_url, fails, monkeypatch):
    """A client that goes away cancels its request's wait; its delivery stays in the batch
    (written, or failed with the rest), the others are answered, and nothing is left over."""
    from storage.deliveries import Delivery

    errors: list[dict] = []
    async with serving(config(db_url, wait=0.5)) as (rt, _http):
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: errors.append(context))
        if fails:
            def failing(_run, _wakes):
                raise RuntimeError("injected: the batch's transaction fails")
            monkeypatch.setattr(jobs, "_queue", failing)
        writer = intake(rt)
        wakes = ({"kind": "command", "key": "cmd:1", "pr_key": "octo/repo#7", "payload": {}},)
        waits = [asyncio.create_task(writer.submit(Delivery(f"c-{i}", "issue_comment", "created", "queued",
                                                            None, wakes if i == 0 else ())))
                 for i in range(3)]
        async def waiting() -> bool:
            return len(writer._waiting) == 3

        await until("the three deliveries waiting for their batch", waiting, every=0.01)
        waits[1].cancel()  # within the batch's 0.5 s wait
        async with asyncio.timeout(30):  # a writer that broke on the cancelled one answers no one
            done = await asyncio.gather(*waits, return_exceptions=True)
        assert isinstance(done[1], asyncio.CancelledError)
        if fails:
            assert [type(d).__name__ for d in (done[0], done[2])] == ["BatchFailed", "BatchFailed"]
            assert await recorded(rt.db) == {}
        else:
            assert (done[0], done[2]) == (True, True)
            assert await recorded(rt.db) == {"c-0": "queued", "c-1": "queued", "c-2": "queued"}
            assert await command_jobs(rt.db) == ["cmd:1"]
        assert writer.batches == 1 and not writer._waiting
        import gc
        gc.collect()  # a future whose exception no one read logs it when collected
        await asyncio.sleep(0)
        assert errors == []


async def test_a_lone_delivery_is_recorded_at_once_not_after_the_batch_wait(db_url):
    """No other request in hand: nothing more is coming for the batch, which closes at once."""
    async with serving(config(db_url, wait=1.0)) as (rt, http):
        intake(rt).max_wait_seconds = 600.0  # far past the test's deadline
        async with asyncio.timeout(60):
            answers = await post_all(http, [("lone-1", 5001)])
        assert answers[0].status_code == 202
        assert await recorded(rt.db) == {"lone-1": "queued"}


async def test_a_batch_waits_for_a_request_in_hand_and_closes_when_it_joins(db_url):
    """A request still reading its body is in hand: the batch waits for it (within its wait),
    and closes as soon as it joined, long before the wait is up."""
    async with serving(config(db_url, wait=1.0)) as (rt, _http):
        writer, body_sent = intake(rt), asyncio.Event()
        writer.max_wait_seconds = 600.0  # far past the test's deadline
        fast = asyncio.create_task(through_endpoint(rt, command(6001), "issue_comment", "in-hand-1"))
        slow = asyncio.create_task(through_endpoint(rt, command(6002), "issue_comment", "in-hand-2", sent=body_sent))

        async def joined() -> bool:
            return len(writer._waiting) == 1

        await until("the first delivery waiting in its batch", joined, every=0.01)
        body_sent.set()
        async with asyncio.timeout(60):
            answers = await asyncio.gather(fast, slow)
        assert [a.status_code for a in answers] == [202, 202]
        assert (writer.batches, writer.largest_batch) == (1, 2)
        assert await recorded(rt.db) == {"in-hand-1": "queued", "in-hand-2": "queued"}
