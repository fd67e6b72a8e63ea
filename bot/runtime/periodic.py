"""The process's periodic duties (the poller, the repository scan, the redelivery), scheduled
one way: first at start-up, then every interval; a run never overlaps the previous one, and
runs missed while one was late collapse into one."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from storage.models import utcnow
from storage.urls import connect_failure, unreachable

T = TypeVar("T")
R = TypeVar("R")


def every(scheduler: AsyncIOScheduler, job_id: str, seconds: float, fn: Callable[..., Awaitable[Any]],
          *args: Any, jitter: float | None = None) -> None:
    scheduler.add_job(fn, "interval", args=list(args), seconds=seconds, jitter=jitter or None,
                      coalesce=True, max_instances=1, misfire_grace_time=max(1, int(seconds)),
                      next_run_time=utcnow(), id=job_id, replace_existing=True)


def duty_failed(log: Any, event: str, e: Exception) -> None:
    """A duty's run failed: with the database unreachable one short line (the workers say so
    too, and the next run tries again), otherwise the traceback."""
    if unreachable(e):
        log.warning(event, error=f"{type(e).__name__}: {connect_failure(e)}", why="database unreachable")
    else:
        log.error(event, exc_info=e)


async def side_by_side(fn: Callable[[T], Awaitable[R]], items: Sequence[T], at_most: int) -> list[R]:
    """`fn` of every item, at most `at_most` at once, the answers in the items' order. A duty
    that reads every repository served must not start a task per repository: each would hold
    a coroutine, its context and a request's frame until the client's slot came its way, and
    a token's repositories are every one the bot ever had a PR in (bench/soak.py found a
    scan's thousand waiting tasks). Only `at_most` tasks take the items in turn."""
    answers: dict[int, R] = {}
    turns = iter(enumerate(items))

    async def worker() -> None:
        for i, item in turns:
            answers[i] = await fn(item)

    await asyncio.gather(*(worker() for _ in range(min(len(items), max(1, at_most)))))
    return [answers[i] for i in range(len(items))]
