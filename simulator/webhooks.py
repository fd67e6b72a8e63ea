"""Signed webhook delivery from a background queue, with injectable delivery faults and chaos.

`emit` never blocks the request that caused the event: it records the delivery, decides its
faults at once (so "drop the next one" means the next event emitted) and queues it. One worker
sends deliveries in order, like GitHub's hookshot does for one hook.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
import structlog

from sharedio.httppool import SharedPool

from .hooklog import HookLog, LogEntry
from .ids import iso, now
from .webhook_chaos import WebhookChaos

log = structlog.get_logger("simulator.webhooks")


@dataclass
class WebhookFaults:
    drop_all: bool = False
    drop_next: int = 0
    duplicate_next: int = 0  # each of the next N is sent twice with the same delivery id
    reorder_next: int = 0  # hold the next N and send them newest first
    reorder_window: float = 2.0  # a partial batch is flushed (reversed) after this many seconds
    delay: float = 0.0  # seconds to wait before sending each delivery

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Attempt:
    at: str
    status: int | None
    error: str | None = None
    redelivery: bool = False  # asked for through POST /app/hook/deliveries/{id}/attempts


@dataclass
class Delivery:
    id: str
    event: str
    action: str | None
    body: bytes
    queued_at: str
    dropped: bool = False
    duplicate: bool = False
    reordered: bool = False
    delay: float = 0.0  # seconds the chaos made it wait before sending
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def status(self) -> int | None:
        return self.attempts[-1].status if self.attempts else None

    @property
    def payload(self) -> dict:
        return json.loads(self.body)

    def to_dict(self, *, with_payload: bool = False) -> dict:
        data: dict[str, Any] = {"id": self.id, "event": self.event, "action": self.action,
                "queued_at": self.queued_at, "status": self.status, "dropped": self.dropped,
                "duplicate": self.duplicate, "reordered": self.reordered, "delay": self.delay,
                "attempts": [a.__dict__ for a in self.attempts]}
        if with_payload:
            data["payload"] = self.payload
        return data


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class WebhookDispatcher:
    def __init__(self, url: str | None = None, secret: str | None = None, *,
                 timeout: float = 10.0, hook_id: int = 1) -> None:
        self.url = url
        self.secret = secret
        self.timeout = timeout
        self.hook_id = hook_id
        self.faults = WebhookFaults()
        self.chaos = WebhookChaos()
        self.deliveries: list[Delivery] = []
        self.log = HookLog()  # every attempt, as the App's delivery log lists it
        self._queue: asyncio.Queue[tuple[Delivery, bool]] | None = None
        self._held: list[Delivery] = []
        self._flush_timer: asyncio.TimerHandle | None = None
        self._overtaken: list[Delivery] = []  # held by reorder chaos until a later one is sent
        self._overtake_timer: asyncio.TimerHandle | None = None
        # Deliveries sent side by side, taken from the one queue in order. GitHub sends a
        # hook's deliveries concurrently (their order is not guaranteed); one sender (the
        # default) keeps the order, so a test reads deliveries as they were made, and a delay
        # holds the later ones too. With one sender each delivery waits for the receiver's
        # answer to the one before: at 300 PRs in flight, 30 s in the queue (bench/scale.py).
        self.senders = 1
        self._workers: list[asyncio.Task] = []
        # Sent through aiohttp's pool, as the bot sends its requests (`sharedio/httppool.py`):
        # through httpx's own transport the sending took a sixth of the simulator's CPU at 200
        # PRs. Made for the URL it sends to (its proxy is that URL's).
        self._client: tuple[str, httpx.AsyncClient, SharedPool] | None = None

    def configure(self, url: str | None, secret: str | None, *, senders: int | None = None) -> None:
        self.url, self.secret = url, secret
        if senders is not None:
            if senders < 1:
                raise ValueError("senders must be at least 1")
            self.senders = senders

    def emit(self, event: str, payload: dict[str, Any]) -> Delivery:
        body = json.dumps(payload, separators=(",", ":")).encode()
        delivery = Delivery(id=str(uuid.uuid4()), event=event, action=payload.get("action"),
                            body=body, queued_at=iso(now()))
        self.deliveries.append(delivery)
        if self.url is None:
            return delivery
        faults = self.faults
        if faults.drop_all or faults.drop_next > 0:
            faults.drop_next = max(0, faults.drop_next - 1)
            delivery.dropped = True
            log.info("webhook dropped", delivery_id=delivery.id, event_name=event)
            self._log_unsent(delivery)
            return delivery
        if faults.duplicate_next > 0:
            faults.duplicate_next -= 1
            delivery.duplicate = True
        if faults.reorder_next > 0:
            faults.reorder_next -= 1
            delivery.reordered = True
            self._hold(delivery)
            return delivery
        chaos = self.chaos.decide()
        if chaos is not None:
            if chaos.drop:
                delivery.dropped = True
                log.info("webhook dropped by chaos", delivery_id=delivery.id, event_name=event)
                self._log_unsent(delivery)
                return delivery
            delivery.duplicate = delivery.duplicate or chaos.duplicate
            delivery.delay = chaos.delay
            if chaos.reorder:
                delivery.reordered = True
                self._overtake(delivery)
                return delivery
        self._enqueue(delivery)
        self._release_overtaken()
        return delivery

    def _log_unsent(self, delivery: Delivery) -> None:
        """A dropped delivery never reached the receiver: GitHub logs it as a hook it could not
        reach, so it shows in the delivery log as failed."""
        self.log.add(guid=delivery.id, event=delivery.event, action=delivery.action,
                     body=delivery.body, redelivery=False, status_code=0,
                     request_headers=self._headers(delivery))

    def redeliver(self, entry_id: int) -> LogEntry | None:
        """Send a logged delivery again (same guid, same body), after what is queued; its
        attempt is logged as a new entry with `redelivery: true`. None for an unknown id."""
        entry = self.log.get(entry_id)
        if entry is None:
            return None
        found = [d for d in self.deliveries if d.id == entry.guid]
        delivery = found[0] if found else Delivery(id=entry.guid, event=entry.event,
                                                   action=entry.action, body=entry.body,
                                                   queued_at=iso(now()))
        self._enqueue(delivery, redelivery=True)
        return entry

    def _enqueue(self, delivery: Delivery, *, redelivery: bool = False) -> None:
        if self._queue is None:
            self._queue = asyncio.Queue()
        self._workers = [w for w in self._workers if not w.done()]
        while len(self._workers) < self.senders:
            self._workers.append(asyncio.get_running_loop().create_task(self._run(), name="sim-webhooks"))
        self._queue.put_nowait((delivery, redelivery))

    def _hold(self, delivery: Delivery) -> None:
        self._held.append(delivery)
        if self.faults.reorder_next == 0:
            self._flush_held()
        elif self._flush_timer is None:
            # A batch that never fills must not be held forever.
            self._flush_timer = asyncio.get_running_loop().call_later(
                self.faults.reorder_window, self._flush_held)

    def _overtake(self, delivery: Delivery) -> None:
        """Hold a delivery until the next one is queued; at most `reorder_window` seconds."""
        self._overtaken.append(delivery)
        if self._overtake_timer is None:
            assert self.chaos.settings is not None
            self._overtake_timer = asyncio.get_running_loop().call_later(
                self.chaos.settings.reorder_window, self._release_overtaken)

    def _release_overtaken(self) -> None:
        if self._overtake_timer is not None:
            self._overtake_timer.cancel()
            self._overtake_timer = None
        held, self._overtaken = self._overtaken, []
        for delivery in held:
            self._enqueue(delivery)

    def _flush_held(self) -> None:
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        held, self._held = self._held, []
        for delivery in reversed(held):
            self._enqueue(delivery)

    async def _run(self) -> None:
        assert self._queue is not None
        while True:
            delivery, redelivery = await self._queue.get()
            try:
                # One queue: with one sender a delay holds later ones too.
                # The chaos drew its delay for the first attempt only.
                wait = self.faults.delay + (0.0 if redelivery else delivery.delay)
                if wait > 0:
                    await asyncio.sleep(wait)
                await self._send(delivery, redelivery=redelivery)
                if delivery.duplicate and not redelivery:
                    await self._send(delivery)
            except Exception as e:  # a broken receiver must never stop later deliveries
                delivery.attempts.append(Attempt(at=iso(now()), status=None, error=repr(e),
                                                 redelivery=redelivery))
                self.log.add(guid=delivery.id, event=delivery.event, action=delivery.action,
                             body=delivery.body, redelivery=redelivery, status_code=0)
            finally:
                self._queue.task_done()

    def _headers(self, delivery: Delivery) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "GitHub-Hookshot/sim",
            "X-GitHub-Event": delivery.event,
            "X-GitHub-Delivery": delivery.id,
            "X-GitHub-Hook-ID": str(self.hook_id),
            "X-GitHub-Hook-Installation-Target-Type": "repository",
        }
        if self.secret:
            headers["X-Hub-Signature-256"] = signature(self.secret, delivery.body)
        return headers

    async def _send(self, delivery: Delivery, *, redelivery: bool = False) -> None:
        url = self.url
        headers = self._headers(delivery)
        entry: dict[str, Any] = dict(guid=delivery.id, event=delivery.event, action=delivery.action,
                     body=delivery.body, redelivery=redelivery, request_headers=headers,
                     delivered_at=now())
        if url is None:
            delivery.attempts.append(Attempt(at=iso(now()), status=None, error="no target",
                                             redelivery=redelivery))
            self.log.add(status_code=0, **entry)
            return
        client = await self._client_for(url)
        started = time.monotonic()
        try:
            resp = await client.post(url, content=delivery.body, headers=headers)
            delivery.attempts.append(Attempt(at=iso(now()), status=resp.status_code,
                                             redelivery=redelivery))
            self.log.add(status_code=resp.status_code, duration=time.monotonic() - started,
                         response_headers=dict(resp.headers), response_body=resp.text, **entry)
            log.debug("webhook delivered", delivery_id=delivery.id, event_name=delivery.event,
                     action=delivery.action, status=resp.status_code, redelivery=redelivery)
        except httpx.HTTPError as e:
            delivery.attempts.append(Attempt(at=iso(now()), status=None, error=repr(e),
                                             redelivery=redelivery))
            self.log.add(status_code=0, duration=time.monotonic() - started,
                         error="timed out" if isinstance(e, httpx.TimeoutException) else None,
                         **entry)
            log.warning("webhook failed", delivery_id=delivery.id, event_name=delivery.event,
                        error=repr(e))

    async def drain(self, timeout: float = 10.0) -> None:
        """Wait until every queued (and held) delivery has been attempted."""
        async with asyncio.timeout(timeout):
            while self._held or self._overtaken:
                await asyncio.sleep(0.02)
            if self._queue is not None:
                await self._queue.join()

    async def aclose(self) -> None:
        for timer in (self._flush_timer, self._overtake_timer):
            if timer is not None:
                timer.cancel()
        for worker in self._workers:
            worker.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers = []
        await self._close_client()

    async def _client_for(self, url: str) -> httpx.AsyncClient:
        if self._client is not None and self._client[0] != url:
            await self._close_client()
        if self._client is None:
            pool = SharedPool(url)
            self._client = (url, httpx.AsyncClient(transport=pool, timeout=self.timeout), pool)
        return self._client[1]

    async def _close_client(self) -> None:
        if self._client is not None:
            _, client, pool = self._client
            self._client = None
            await client.aclose()
            await pool.close()

    def find(self, event: str | None = None, action: str | None = None) -> list[Delivery]:
        return [d for d in self.deliveries
                if (event is None or d.event == event) and (action is None or d.action == action)]
