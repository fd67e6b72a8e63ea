"""POST /webhook's caps, over real HTTP and at the ASGI edge: a body past 25 MB however it comes
(declared, chunked with no Content-Length, or longer than it declared), headers past their
columns, a metric's series a sender cannot grow, and the intake's batches bounded in size and
written as soon as they are full.

Each body over the cap is signed with the right secret: only the cap stands between it and
the database."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from sqlmodel import select

from bot.intake.batch import Intake
from bot.intake.webhook import MAX_BODY_BYTES, MAX_DELIVERY_ID, MAX_EVENT, receive_webhook
from storage.database import Database
from storage.deliveries import Delivery
from storage.models import WebhookDelivery

from ..serving import make_config, serving
from .test_webhooks import signed

CHUNK = 1024 * 1024


def _oversized() -> bytes:
    """A JSON object just past the cap, signed it would be recorded (an unknown event, ignored)."""
    filler = MAX_BODY_BYTES - len(b'{"a": ""}') + 1
    return b'{"a": "' + b"x" * filler + b'"}'


async def _recorded(db) -> list[str]:
    async with db.read_session() as s:
        return sorted(d.delivery_id for d in await s.exec(select(WebhookDelivery)))


async def test_a_body_declared_past_the_cap_is_refused_before_any_of_it_is_sent(sqlite_db_url):
    """The declared length alone refuses it: the answer comes while the client has sent only its
    headers, so a client declaring gigabytes costs the server nothing."""
    async with serving(make_config(sqlite_db_url)) as (rt, http):
        reader, writer = await asyncio.open_connection("127.0.0.1", http.base_url.port)
        try:
            headers = signed(b"", "push", "declared-1") | {"Content-Length": str(MAX_BODY_BYTES + 1)}
            writer.write(b"POST /webhook HTTP/1.1\r\nHost: bot\r\n"
                         + b"".join(f"{k}: {v}\r\n".encode() for k, v in headers.items()) + b"\r\n")
            await writer.drain()
            async with asyncio.timeout(30):  # the body never comes: only the cap answers
                status_line = await reader.readline()
        finally:
            writer.close()
        assert status_line.split()[1] == b"413", status_line
        assert await _recorded(rt.db) == []


async def test_a_chunked_body_with_no_length_is_refused_once_past_the_cap(sqlite_db_url):
    """No Content-Length (chunked): the body is counted as it comes, and refused once past the
    cap; one under the cap is recorded as any other."""
    async def chunks(body: bytes) -> AsyncIterator[bytes]:
        for start in range(0, len(body), CHUNK):
            yield body[start:start + CHUNK]

    async with serving(make_config(sqlite_db_url)) as (rt, http):
        small = json.dumps({"zen": "chunked"}).encode()
        r = await http.post("/webhook", content=chunks(small), headers=signed(small, "ping", "chunked-small"))
        assert r.request.headers.get("transfer-encoding") == "chunked" and "content-length" not in r.request.headers
        assert r.status_code == 202, r.text

        body = _oversized()
        r = await http.post("/webhook", content=chunks(body), headers=signed(body, "push", "chunked-huge"))
        assert r.status_code == 413, r.text
        assert await _recorded(rt.db) == ["chunked-small"]


async def test_a_body_longer_than_it_declared_is_refused_once_past_the_cap(sqlite_db_url):
    """A server in front may hand on more than the Content-Length said: the count is of what
    arrives, not of what was declared."""
    body = _oversized()
    headers = [(k.lower().encode(), v.encode()) for k, v in signed(body, "push", "longer-1").items()]
    headers.append((b"content-length", b"100"))
    pieces = [body[start:start + CHUNK] for start in range(0, len(body), CHUNK)]
    sent: list[dict] = []

    async def receive() -> dict:
        chunk = pieces.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(pieces)}

    async def send(message: dict) -> None:
        sent.append(message)

    async with serving(make_config(sqlite_db_url)) as (rt, _http):
        await receive_webhook(rt, {"type": "http", "headers": headers}, receive, send)
        assert sent[0]["status"] == 413, sent
        assert await _recorded(rt.db) == []


async def test_headers_longer_than_their_columns_are_refused_and_nothing_recorded(sqlite_db_url):
    """SQLite stores a string of any length, so only the cap keeps an event or a delivery id
    longer than PostgreSQL's column from being recorded on one backend and failing on the other."""
    body = b'{"zen": "long headers"}'
    async with serving(make_config(sqlite_db_url)) as (rt, http):
        fits = {"d" * MAX_DELIVERY_ID: "ping", "event-fits": "e" * MAX_EVENT}
        for delivery, event in fits.items():
            r = await http.post("/webhook", content=body, headers=signed(body, event, delivery))
            assert r.status_code == 202, (delivery, event, r.text)
        too_long = {"d" * (MAX_DELIVERY_ID + 1): "ping", "event-too-long": "e" * (MAX_EVENT + 1)}
        for delivery, event in too_long.items():
            r = await http.post("/webhook", content=body, headers=signed(body, event, delivery))
            assert r.status_code == 400 and "header" in r.json()["error"], (delivery, event, r.text)
        assert await _recorded(rt.db) == sorted(fits)


async def test_an_event_no_reader_knows_is_counted_as_other(sqlite_db_url):
    """The webhook metric's `event` label is the event's name only for the events the bot
    knows: a sender naming a new event in each delivery must not add a series each time."""
    body = b'{"action": "created"}'
    async with serving(make_config(sqlite_db_url)) as (_rt, http):
        for n in range(3):
            r = await http.post("/webhook", content=body, headers=signed(body, f"made-up-{n}", f"made-up-{n}"))
            assert r.status_code == 202, r.text
        r = await http.post("/webhook", content=b"{}", headers=signed(b"{}", "ping", "a-ping"))
        assert r.status_code == 202, r.text
        text = (await http.get("/metrics")).text
    series = [line for line in text.splitlines() if line.startswith("convergebot_webhook_deliveries_total{")]
    assert any('event="other"' in line for line in series), series
    assert any('event="ping"' in line for line in series), series
    assert not any("made-up" in line for line in series), series


async def _submit_all(intake: Intake, n: int, prefix: str) -> list[bool]:
    deliveries = [Delivery(f"{prefix}-{i}", "ping", None, "ignored") for i in range(n)]
    async with asyncio.timeout(30):  # milliseconds when written as they should be
        return await asyncio.gather(*(intake.submit(d) for d in deliveries))


async def test_a_burst_is_written_in_batches_of_at_most_the_maximum(db_url):
    """Deliveries waiting together are written `max_batch` at a time: one transaction per burst
    however large would grow its one INSERT past the backend's bound on parameters (and hold
    every request of the burst until all of it committed)."""
    db = Database(db_url)
    try:
        intake = Intake(db, max_wait_seconds=0.05, max_batch=64)
        assert await _submit_all(intake, 1000, "burst") == [True] * 1000
        assert intake.largest_batch == 64 and intake.batches >= 1000 // 64, (intake.batches, intake.largest_batch)
        assert len(await _recorded(db)) == 1000
    finally:
        await db.dispose()


async def test_a_full_batch_is_written_at_once_without_waiting_out_its_wait(sqlite_db_url):
    """A batch that reached its maximum closes there: deliveries from outside any request (none
    in hand to wait for) are written at once, not after the batch's wait (ten minutes here)."""
    db = Database(sqlite_db_url)
    try:
        intake = Intake(db, max_wait_seconds=600.0, max_batch=2)
        assert await _submit_all(intake, 4, "full") == [True] * 4
        assert (intake.batches, intake.largest_batch) == (2, 2)
    finally:
        await db.dispose()


async def test_a_batch_closes_once_every_request_in_hand_joined_it(sqlite_db_url):
    """Requests in hand (`Intake.expecting`) that all joined the batch: nothing more is on its
    way, and the batch is written at once, not after its wait (ten minutes here); one that is
    still reading its body keeps the batch open until it joins."""
    db = Database(sqlite_db_url)
    try:
        intake, body_read = Intake(db, max_wait_seconds=600.0, max_batch=64), asyncio.Event()

        async def request(delivery_id: str, *, reading: asyncio.Event | None = None) -> bool:
            with intake.expecting():
                if reading is not None:
                    await reading.wait()
                return await intake.submit(Delivery(delivery_id, "ping", None, "ignored"))

        async with asyncio.timeout(30):  # milliseconds when written as they should be
            assert await asyncio.gather(request("a"), request("b")) == [True, True]
            assert (intake.batches, intake.largest_batch) == (1, 2)
            slow = asyncio.create_task(request("slow", reading=body_read))
            fast = asyncio.create_task(request("fast"))
            while len(intake._waiting) < 1:
                await asyncio.sleep(0.01)
            assert not fast.done()  # the batch waits for the request still reading its body
            body_read.set()
            assert await asyncio.gather(fast, slow) == [True, True]
        assert (intake.batches, intake.largest_batch) == (2, 2)
        assert await _recorded(db) == ["a", "b", "fast", "slow"]
    finally:
        await db.dispose()
