"""The in-process job runner: N workers claim due jobs under a lease and run their handlers.

Long-running kinds (the fixer's runs) have workers of their own: a fixer that works for
minutes never holds a worker the other PRs' syncs, steps and writes need.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import socket
import time
import traceback
import uuid
from collections import deque
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypedDict

import structlog

from bot import metrics
from storage import jobs, prs
from storage.database import Database
from storage.models import Job, utcnow
from storage.urls import connect_failure, unreachable

log = structlog.get_logger(__name__)

# A coroutine function: each job's handler runs as a task of its own (`WorkerPool._run`).
Handler = Callable[[Job], Coroutine[Any, Any, None]]


class _Claims(TypedDict):
    """What each lane's workers claim: `jobs.claim` keyword arguments; `long` None when there
    is no long lane."""

    short: dict[str, Any]
    long: dict[str, Any] | None


def _this_task() -> asyncio.Task[Any]:
    """The task that runs the caller: a coroutine run by the event loop always has one."""
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("not called from a task")
    return task


class Reschedule(Exception):
    """Raised by a handler to run the job again at `at` without spending an attempt.

    Rate limits use it: the job waits in the table, not in a sleeping worker, so other PRs'
    jobs keep flowing.
    """

    def __init__(self, at: datetime, why: str) -> None:
        super().__init__(why)
        self.at = at
        self.why = why


@dataclass(frozen=True)
class PoolSettings:
    workers: int = 4
    lease_seconds: float = 60.0
    idle_poll_seconds: float = 1.0
    backoff_base_seconds: float = 2.0
    backoff_cap_seconds: float = 600.0
    # While a worker cannot reach the database, it looks again after a pause that doubles from
    # `idle_poll_seconds` up to this, jittered: replicas' workers do not knock all at once.
    outage_backoff_cap_seconds: float = 30.0
    # Job kinds that run long, and the workers that take only those (0: every worker takes
    # every kind). The other workers never take them.
    long_kinds: tuple[str, ...] = ()
    long_workers: int = 0


# Delayed wakes are rounded up to a grid, and one timer serves all wakes of a slot: a burst of
# webhooks, each queueing a debounced sync, sets a few timers, not one per delivery. The grid is
# this fine for wakes due soon and coarser the further off they are (a twentieth of the delay,
# in powers of two of it): a run queueing a wake an hour off per PR (a review's timeout) keeps a
# few hundred timers for the hour, not one per PR, each a wake at most 5% late.
WAKE_SLOT_SECONDS = 0.05
WAKE_LATENESS = 1 / 20


@dataclass
class _Lane:
    """The workers of one lane that are idle, and a wake no idle worker was there to take."""

    idle: deque[asyncio.Future[None]] = field(default_factory=deque)
    missed: bool = False

    def poke(self) -> None:
        """Send one idle worker to look for a job; if none is idle, the next to go idle looks again."""
        while self.idle:
            waiter = self.idle.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.missed = True


class WorkerPool:
    def __init__(
        self, db: Database, handlers: Mapping[str, Handler], settings: PoolSettings = PoolSettings()
    ) -> None:
        self.db = db
        self.handlers = dict(handlers)
        self.settings = settings
        self._instance = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self._tasks: list[asyncio.Task] = []
        self._lanes_idle = {"short": _Lane(), "long": _Lane()}
        self._timers: dict[tuple[float, int], asyncio.TimerHandle] = {}  # wake slot (width, index) → its timer
        self._stopping = False

    def wake(self, delay_seconds: float = 0.0, *, lanes: tuple[str, ...] = ("short", "long")) -> None:
        """New work was queued (due in `delay_seconds`): one idle worker of each lane (of
        `lanes`) looks then.

        Not every idle worker: a worker that claims a job sends the next one of its lane to
        look (`_loop`), so a burst of jobs draws in as many workers as it has jobs, and a single
        job costs one or two looks instead of one per idle worker.
        """
        if delay_seconds <= 0:
            for name in lanes:
                self._lanes_idle[name].poke()
            return
        loop = asyncio.get_running_loop()
        width = WAKE_SLOT_SECONDS * 2 ** max(0, math.floor(math.log2(delay_seconds * WAKE_LATENESS / WAKE_SLOT_SECONDS)))
        slot = (width, math.ceil((loop.time() + delay_seconds) / width))
        if slot not in self._timers:
            self._timers[slot] = loop.call_at(slot[0] * slot[1], self._wake_slot, slot)

    def _wake_slot(self, slot: tuple[float, int]) -> None:
        self._timers.pop(slot, None)
        self.wake()

    def start(self) -> None:
        lanes = self._lanes()
        for n in range(self.settings.workers):
            self._tasks.append(asyncio.create_task(
                self._loop(f"{self._instance}:{n}", lanes["short"], self._lanes_idle["short"])))
        if long := lanes["long"]:
            for n in range(self.settings.long_workers):
                self._tasks.append(asyncio.create_task(
                    self._loop(f"{self._instance}:long{n}", long, self._lanes_idle["long"])))

    def _queued(self) -> tuple[int, int]:
        """How many jobs of the long lane's kinds and of the others this process has queued
        (`jobs.queued_by_kind`): compared before and after a handler, what lanes it gave work."""
        counts = jobs.queued_by_kind
        long = sum(counts[kind] for kind in self._long_kinds())
        return long, counts.total() - long

    def _long_kinds(self) -> tuple[str, ...]:
        return self.settings.long_kinds if self.settings.long_workers > 0 else ()

    def _lanes(self) -> _Claims:
        """What each kind of worker claims: `jobs.claim` keyword arguments. Only kinds this
        process has a handler for: a job of a kind a newer release added (two releases serve
        side by side through a rolling deploy) waits for a replica that knows it."""
        handled = tuple(sorted(self.handlers))
        long_kinds = self._long_kinds()
        if not long_kinds:
            return {"short": {"kinds": handled}, "long": None}
        return {"short": {"kinds": tuple(k for k in handled if k not in long_kinds)}, "long": {"kinds": long_kinds}}

    async def stop(self, grace_seconds: float = 5.0) -> None:
        """Finish current jobs within the grace period; cancelled jobs hand their lease back."""
        self._stopping = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for lane in self._lanes_idle.values():
            while lane.idle:
                waiter = lane.idle.popleft()
                if not waiter.done():
                    waiter.set_result(None)
        if not self._tasks:
            return
        _, pending = await asyncio.wait(self._tasks, timeout=grace_seconds)
        for task in pending:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    async def _loop(self, owner: str, claim: dict, lane: _Lane) -> None:
        ran = False
        outage = _Outage(owner)
        while not self._stopping:
            try:
                # After a job, the next claim goes straight for the write lock: while the queue
                # is long the lock-free look would find a job every time, and cost a read.
                ran = await self.run_one(owner, _claimed=lane.poke, _look=not ran, **claim)
            except Exception as e:
                # Every statement of a look (and of a job's own bookkeeping) is the database's:
                # while it is down, one line when this worker first fails, and pauses that grow.
                outage.failed(e)
                ran = False
                await self._idle(lane, jobs.backoff_delay(outage.failures, self.settings.idle_poll_seconds,
                                                          self.settings.outage_backoff_cap_seconds))
                continue
            outage.over()
            if ran or self._stopping:
                continue
            if lane.missed:
                # A wake came while this lane's workers were all busy or looking (this one
                # included, after its look had begun): look again rather than sleep past it.
                lane.missed = False
                continue
            # The poll's timeout bounds what no wake tells of: a job queued by another process
            # or coming due by its run_at.
            await self._idle(lane, self.settings.idle_poll_seconds)

    async def _idle(self, lane: _Lane, seconds: float) -> None:
        """Wait `seconds`, or less if a wake sends this worker to look (or `stop` ends it)."""
        waiter = asyncio.get_running_loop().create_future()
        lane.idle.append(waiter)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter, seconds)
        finally:
            if not waiter.done():
                waiter.cancel()
            with contextlib.suppress(ValueError):
                lane.idle.remove(waiter)

    async def run_one(self, owner: str | None = None, *, _claimed: Callable[[], None] | None = None,
                      _look: bool = True, **lane) -> bool:
        """Claim and run one due job (of the lane's kinds); False when nothing was due."""
        owner = owner or f"{self._instance}:direct"
        job = await jobs.claim(self.db, owner, self.settings.lease_seconds, look=_look, **lane)
        if job is None:
            return False
        if _claimed is not None:
            _claimed()  # there may be more: the next idle worker of the lane looks
        bound = log.bind(
            job_id=job.id, job_kind=job.kind, pr_key=job.pr_key, process_key=job.process_key,
            round=job.round_no, attempt=job.attempts,
        )
        if job.attempts > job.max_attempts:
            # Its workers keep dying mid-job: stop reclaiming it.
            await jobs.give_up(self.db, job, "lease expired on every attempt")
            bound.error("job.failed", why="lease expired on every attempt")
            return True
        if not await self._owned(job):
            await jobs.drop(self.db, job, "process_key no longer owns the PR")
            bound.info("job.dropped", why="stale process_key")
            return True
        handler = self.handlers.get(job.kind)
        if handler is None:
            await jobs.give_up(self.db, job, f"no handler for job kind {job.kind!r}")
            bound.error("job.failed", why="no handler")
            return True
        await self._run(job, handler, bound)
        return True

    async def _owned(self, job: Job) -> bool:
        # A job of an older run (abandoned, resubmitted) must not run its handler at all.
        if job.process_key is None:
            return True
        view = await prs.get(self.db, job.pr_key) if job.pr_key else None
        return (
            view is not None
            and view.pr.process_key == job.process_key
            and view.run_state == "active"
        )

    async def _still_owned(self, job: Job) -> bool:
        """`_owned` for the heartbeat: a database that cannot say is no reason to stop the job."""
        try:
            return await self._owned(job)
        except Exception as e:
            log.debug("job.ownership_not_read", job_id=job.id, error=connect_failure(e))
            return True

    async def _run(self, job: Job, handler: Handler, bound) -> None:
        # The handler runs in a task of its own, so the heartbeat can cancel the job and not the
        # worker: a worker loop cancelled on every lost lease would be one worker fewer for good.
        # Cancelling the worker (shutdown) still cancels the handler: it is awaited here.
        before = self._queued()
        back_now = False  # the job was handed back due at once
        work = asyncio.create_task(handler(job))
        heartbeat = asyncio.create_task(self._heartbeat(job, work))
        try:
            await work
        except Reschedule as r:
            await jobs.reschedule(self.db, job, r.at, r.why)
            bound.info("job.rescheduled", run_at=r.at.isoformat(), why=r.why)
        except asyncio.CancelledError:
            # Shutdown or a lost lease: hand the job back so it runs again promptly.
            await asyncio.shield(jobs.reschedule(self.db, job, utcnow(), "cancelled"))
            back_now = True
            bound.warning("job.cancelled")
            if _this_task().cancelling():
                raise  # the worker itself is being stopped
        except Exception as e:
            delay = jobs.backoff_delay(
                job.attempts, self.settings.backoff_base_seconds, self.settings.backoff_cap_seconds
            )
            error = "".join(traceback.format_exception_only(e)).strip()
            await jobs.fail(self.db, job, error, delay)
            bound.warning("job.error", error=error, retry_in=round(delay, 2),
                          final=job.attempts >= job.max_attempts)
        else:
            await jobs.complete(self.db, job)
            bound.debug("job.done")
        finally:
            heartbeat.cancel()
            # The handler queued work (effects, a next step, a fixer run) or the job is due
            # again: an idle worker of each lane that got some looks now. A lane that got none
            # is left asleep: after every job, both lanes looked, and the fixers' lane found
            # nothing in nearly all of those looks (a read transaction each).
            after = self._queued()
            long_job = job.kind in self._long_kinds()
            lanes = tuple(name for name, gave in (
                ("long", after[0] != before[0] or (back_now and long_job)),
                ("short", after[1] != before[1] or (back_now and not long_job)),
            ) if gave)
            if lanes:
                self.wake(lanes=lanes)

    async def _heartbeat(self, job: Job, runner: asyncio.Task | None) -> None:
        interval = self.settings.lease_seconds / 3
        while True:
            await asyncio.sleep(interval)
            try:
                renewed = await jobs.renew_lease(self.db, job, self.settings.lease_seconds)
            except Exception as e:
                # The database is down (the worker says so once): beat again, and learn then
                # whether the lease outlived the outage.
                log.debug("job.lease_not_renewed", job_id=job.id, error=connect_failure(e))
                continue
            if not renewed:
                # Our lease ran out and another worker re-claimed the job: cancelled here, so this
                # runner stops before it acts (pushes, comments) alongside the new owner's run.
                log.warning("job.lease_lost", job_id=job.id)
            elif not await self._still_owned(job):
                # Its run was stopped or superseded meanwhile: a long fixer run would otherwise
                # go on working (and pushing) for a run nobody drives any more.
                log.info("job.orphaned", job_id=job.id, pr_key=job.pr_key, process_key=job.process_key)
            else:
                continue
            if runner is not None:
                runner.cancel()
            return


class _Outage:
    """One worker's view of the database: the line when it first fails, the line when it answers
    again, and in between only the count (`convergebot_jobs_look_failures_total`)."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.failures = 0  # in a row
        self._since = 0.0
        self._down = False  # the first failure said the database was unreachable (not a bug of ours)

    def failed(self, e: Exception) -> None:
        self.failures += 1
        metrics.JOBS_LOOK_FAILURES.inc()
        if self.failures > 1:
            return
        self._since = time.monotonic()
        error = f"{type(e).__name__}: {connect_failure(e)}"
        self._down = unreachable(e)
        if self._down:
            log.warning("jobs.database_unreachable", owner=self.owner, error=error,
                        consequence="this worker looks again after growing pauses")
        else:  # not an outage but a mistake of ours: its traceback, once
            log.error("jobs.loop_failing", owner=self.owner, error=error, exc_info=e)

    def over(self) -> None:
        if not self.failures:
            return
        log.info("jobs.database_back" if self._down else "jobs.loop_recovered", owner=self.owner,
                 failed_looks=self.failures, seconds=round(time.monotonic() - self._since, 1))
        self.failures = 0
