"""The process's periodic duties (the poller, the repository scan, the redelivery), scheduled
one way: first at start-up, then every interval; a run never overlaps the previous one, and
runs missed while one was late collapse into one."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from storage.models import utcnow
from storage.urls import connect_failure, unreachable


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
