"""Group commit for /webhook: deliveries that arrive together are recorded in one transaction.

Each delivery is its own write otherwise, and on SQLite every write transaction queues for the
one writer lock (with the job workers), so under a burst most of a request's time is spent
waiting for the lock. Here one task writes for all requests: it takes what is waiting (waiting
at most `max_wait_seconds` after the oldest for more to arrive, and at most `max_batch`),
records the batch and queues its jobs in one transaction (`deliveries.record_many`), and then
answers each request's future. A request is answered only after its batch committed, so a 202
is as durable as before; if the batch's transaction fails, every request in it gets the error
(the handler answers 503, GitHub may redeliver, and nothing acknowledged is lost).

After the commit the intake wakes the job workers for the soonest job the batch queued, and not
at all when every delivery's sync coalesced into one already queued: a burst of webhooks about
one PR costs one wake, not one per delivery.

A batch closes before its wait is up once every request the endpoint has in hand waits in it
(`expecting`: a request counts from its start until it is answered): nothing more is on
its way, and waiting on would only keep the server idle, under a burst whose every connection
waits for the batch, or a lone delivery waiting for company that does not come. (PostgreSQL's
`commit_siblings` is the same thought: delay a commit only while others are active.)

The writer task runs only while there is work: it ends when the queue is empty and the next
delivery starts a new one, so there is nothing to start or stop with the server.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from storage import deliveries
from storage.database import Database
from storage.deliveries import Delivery
from storage.models import utcnow

log = structlog.get_logger(__name__)


class BatchFailed(Exception):
    """The transaction of the batch this delivery was in failed: nothing of it was recorded."""


@dataclass
class _Waiting:
    delivery: Delivery
    future: asyncio.Future[bool]
    since: float


def _fail(future: asyncio.Future[bool], error: BatchFailed) -> None:
    """`future` raises `error` to the request waiting on it, if one still is; read here, so a
    request cancelled after its batch failed, before it woke, does not also log "exception was
    never retrieved" (reading it does not keep the waiter from raising it)."""
    if not future.done():
        future.set_exception(error)
        future.exception()


class _InHand:
    """`Intake.expecting`: counts the requests in hand for one intake (no state of its own, so
    one serves every request)."""

    def __init__(self, intake: Intake) -> None:
        self.intake = intake

    def __enter__(self) -> None:
        self.intake._in_hand += 1

    def __exit__(self, *_exc: object) -> None:
        self.intake._in_hand -= 1
        self.intake._close_if_complete()


class Intake:
    """One writer for deliveries; `submit` returns once the delivery's batch committed."""

    def __init__(self, db: Database, *, max_wait_seconds: float = 0.002, max_batch: int = 64,
                 wake: Callable[[float], None] = lambda _delay: None) -> None:
        self.db = db
        self.wake = wake  # tells the job workers new jobs fall due in that many seconds
        self.max_wait_seconds = max_wait_seconds
        self.max_batch = max_batch
        self._waiting: deque[_Waiting] = deque()
        self._full: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._in_hand = 0  # requests from their start to their answer (`expecting`)
        self.batches = 0  # committed or failed, for tests and the benchmark
        self.largest_batch = 0
        self._expecting = _InHand(self)

    def expecting(self) -> _InHand:
        """A request in hand that may submit a delivery before it leaves this `with` block: a
        batch waits for it (within its wait), and closes as soon as every one in hand joined it."""
        return self._expecting

    def _complete(self) -> bool:
        """The batch forming holds every request in hand (or is full). Deliveries submitted
        from outside any request (none is in hand) wait out the batch's wait."""
        n = len(self._waiting)
        return n >= self.max_batch or 0 < self._in_hand <= n

    def _close_if_complete(self) -> None:
        if self._full is not None and not self._full.done() and self._complete():
            self._full.set_result(None)

    async def submit(self, delivery: Delivery) -> bool:
        """True if recorded now, False if seen before; raises BatchFailed if its batch failed."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        self._waiting.append(_Waiting(delivery, future, loop.time()))
        self._close_if_complete()
        if self._task is None:
            self._task = asyncio.create_task(self._drain(), name="webhook-intake")
        # A request cancelled while it waits cancels this future and leaves its delivery in the
        # batch (a redelivery is then a duplicate): the writer answers only futures not done.
        return await future

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._waiting:
                # Wait for more only up to `max_wait_seconds` after the oldest arrived: deliveries
                # that already queued behind the previous batch's write are written at once.
                remaining = self._waiting[0].since + self.max_wait_seconds - loop.time()
                if remaining > 0 and not self._complete():
                    self._full = loop.create_future()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(remaining):
                            await self._full
                    self._full = None
                batch = [self._waiting.popleft() for _ in range(min(self.max_batch, len(self._waiting)))]
                await self._write(batch)
        finally:
            # Reached with the queue empty (no await since the check above, so no delivery can
            # be slipping in), or on cancellation: then no one waits forever.
            self._task = None
            while self._waiting:
                _fail(self._waiting.popleft().future, BatchFailed("the webhook intake stopped"))

    async def _write(self, batch: list[_Waiting]) -> None:
        self.batches += 1
        self.largest_batch = max(self.largest_batch, len(batch))
        try:
            recorded = await deliveries.record_many(self.db, [w.delivery for w in batch])
        except Exception as e:
            log.exception("webhook.batch_failed", deliveries=len(batch))
            for w in batch:
                _fail(w.future, BatchFailed(f"{type(e).__name__}: {e}"))
            return
        except BaseException:
            for w in batch:
                _fail(w.future, BatchFailed("the webhook intake stopped"))
            raise
        for w, new in zip(batch, recorded.new, strict=True):
            if not w.future.done():
                w.future.set_result(new)
        if recorded.soonest is not None:  # after the answers: nothing here may hold them up
            self.wake(max(0.0, (recorded.soonest - utcnow()).total_seconds()))
