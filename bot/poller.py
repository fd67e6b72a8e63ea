"""The poller: the truth-keeper for missed webhooks and out-of-band changes.

An APScheduler 3.x interval job; each tick queues a sync job for every active PR (a conditional
re-read, so an unchanged PR costs no rate limit) and resumes keyless rows.
"""

from __future__ import annotations

from datetime import timedelta

import structlog
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from storage import deliveries, jobs, prs
from storage.models import utcnow

from . import liveness, metrics
from .budget import paused
from .enrollment import SubmitOptions, submit_pr
from .prkey import parse_pr_key
from .runtime import Runtime

log = structlog.get_logger(__name__)

JOB_RETENTION = timedelta(days=1)
RETENTION = timedelta(days=7)


class Poller:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.ticks = 0
        self.queued = 0  # syncs the last tick queued

    def schedule(self, scheduler: AsyncIOScheduler) -> None:
        cfg = self.rt.config.poller
        scheduler.add_job(
            self.tick,
            "interval",
            seconds=cfg.interval_seconds,
            jitter=cfg.jitter_seconds or None,
            coalesce=True,
            max_instances=1,
            misfire_grace_time=max(1, int(cfg.interval_seconds)),
            next_run_time=utcnow(),
            id="poller",
            replace_existing=True,
        )

    async def tick(self) -> None:
        self.ticks += 1
        stamp = utcnow().strftime("%Y%m%dT%H%M%S.%f")
        try:
            views = await prs.list_all(self.rt.db)
            active = []
            for view in views:
                pr = view.pr
                if pr.process_key is None and view.derived_status not in ("converged", "merged", "abandoned"):
                    # A crash between insert and key publish left it keyless: resume it.
                    await submit_pr(self.rt.db, parse_pr_key(pr.pr_key), SubmitOptions(
                        max_rounds=pr.max_rounds, converge_only=pr.converge_only, submitted_by="poller"))
                    continue
                if view.resubmittable:
                    continue
                active.append(pr.pr_key)
            # One transaction and a few multi-row statements for the whole tick. A PR whose sync
            # is still queued gets no second one: the queue stays one job per PR however slow
            # the workers are.
            async with self.rt.db.session() as s:
                self.queued = await jobs.enqueue_syncs(s, active, lambda key: f"poll:{key}:{stamp}")
            await liveness.check(self.rt, active)
            self.rt.health.runaway = await paused(self.rt)
            await jobs.prune(self.rt.db, utcnow() - JOB_RETENTION, utcnow() - RETENTION)
            await deliveries.prune(self.rt.db, utcnow() - RETENTION)
        except Exception as e:
            self.rt.health.last_poll_error = f"{type(e).__name__}: {e}"
            log.exception("poller.failed")
            return
        self.rt.health.last_poll_at = utcnow()
        self.rt.health.last_poll_error = None
        metrics.POLLS.inc()
        metrics.ACTIVE_PRS.set(len(active))
        metrics.RUNAWAY_PRS.set(len(self.rt.health.runaway))
        log.info("poller.tick", active=len(active), queued=self.queued, tick=self.ticks)
        self.rt.wake_workers()
