"""The poller: the truth-keeper for missed webhooks and out-of-band changes.

An APScheduler 3.x interval job; each tick queues a sync job (a conditional re-read, so an
unchanged PR costs no rate limit) for every active PR but those that may rest (see `_resting`)
or that their own work reads, and resumes keyless rows (docs/architecture.md, "Polling").
"""

from __future__ import annotations

import asyncio
import math
import time
from datetime import datetime, timedelta

import structlog
from apscheduler.schedulers.asyncio import AsyncIOScheduler

from bot import metrics
from bot.config import retention_settings
from bot.engine import liveness, outbox
from bot.engine.read import settings_of
from bot.engine.submit import SubmitOptions, submit_pr
from bot.engine.write_budget import paused
from bot.intake import redelivery
from bot.intake.repowatch import RepoWatch
from bot.rules.decide import review_wait_deadlines
from bot.runtime.context import Runtime
from bot.runtime.periodic import duty_failed, every, side_by_side
from storage import backup, jobs, marks, prs, retention
from storage.keys import PrKey
from storage.models import utcnow
from storage.prs import PrView
from storage.statuses import JobKind, Status

log = structlog.get_logger(__name__)



class Poller:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.ticks = 0
        self.queued = 0  # syncs the last tick queued
        self.deferred = 0  # idle re-reads the last tick put off for the rate limit
        self.skipped = 0  # re-reads the last tick left out: their repository's list said unchanged
        self.fresh = 0  # re-reads the last tick left out: a step had just read the PR
        self.watch = RepoWatch(rt.github)
        self.polled_at: dict[PrKey, datetime] = {}  # when this process last queued each PR's re-read
        self.watch_changed: set[PrKey] = set()  # PRs the last tick's list reads said changed
        self.busy_last: set[PrKey] = set()  # PRs the last tick left out for their queued work
        self._ticking = asyncio.Lock()  # held while a tick runs, so a shutdown can wait for it

    def schedule(self, scheduler: AsyncIOScheduler) -> None:
        cfg = self.rt.config.poller
        every(scheduler, "poller", cfg.interval_seconds, self.tick, jitter=cfg.jitter_seconds)

    def _may_rest(self, view: PrView, now: datetime, settings) -> bool:
        """Whether a PR only waits for something that would change it on GitHub: a review of
        its head (or a push, a comment) moves it up its repository's PR list, and neither its
        review timeout nor its next nudge has come due (the first tick after it re-reads it,
        as it would have without resting)."""
        pr = view.pr
        if not view.awaits_review:
            return False
        timeout_at, nudge_at = review_wait_deadlines(pr.waiting_since, pr.last_nudge_at, now, settings)
        return min(timeout_at, nudge_at) > now

    @staticmethod
    def _at_work(view: PrView) -> bool:
        """A PR in a round under way (`converging`: its replies, its fixer, the check of what
        the fixer did): our own jobs move it on, what else would (a push, a close, a command)
        sends a webhook, and a fixer's round that nothing would close is the liveness check's
        to heal."""
        return view.derived_status == Status.CONVERGING

    async def _resting(self, views: list[PrView], active: list[PrKey]) -> set[PrKey]:
        """The active PRs this tick need not re-read.

        In a repository with at least `repo_watch_min_prs` PRs that may rest, one conditional
        read of its PR list tells which of them changed since the last tick; the others rest.
        While the redelivery recovers lost webhooks of their repository (`redelivery.covers`),
        the PRs that may rest in the other repositories rest on their webhooks alone, and so do
        PRs at work in a round (`_at_work`): what would change them sends one, and one GitHub
        could not deliver comes back within a redelivery interval.
        Each resting PR is still re-read once per `full_sync_seconds`, the longest unread first
        and only a share of them per tick, so the re-reads spread over the ticks."""
        cfg = self.rt.config.poller
        if self.rt.github is None:
            return set()
        covering = redelivery.covers(self.rt)
        if cfg.repo_watch_min_prs <= 0 and not covering:
            return set()

        def backed(repo: str) -> bool:
            return covering and redelivery.holds(self.rt, repo)

        self.watch_changed = set()
        if not self.watch.loaded:
            self.watch.load(await marks.load(self.rt.db))
        self.watch.begin()
        now = utcnow()
        settings, wanted = settings_of(self.rt), set(active)
        by_repo: dict[str, list[PrView]] = {}
        at_work: list[PrKey] = []
        for view in views:
            if view.pr.pr_key not in wanted:
                continue
            if backed(view.pr.repo.lower()) and self._at_work(view):
                at_work.append(view.pr.pr_key)
            elif self._may_rest(view, now, settings):
                by_repo.setdefault(view.pr.repo.lower(), []).append(view)
        watched = {repo: c for repo, c in by_repo.items()
                   if cfg.repo_watch_min_prs > 0 and len(c) >= cfg.repo_watch_min_prs}
        # The repositories are read side by side, as many at once as the client has slots.
        answers = await side_by_side(self.watch.changed, list(watched), self.rt.config.github.max_concurrency)
        resting: list[PrKey] = []
        for candidates, changed in zip(watched.values(), answers, strict=True):
            if changed is not None:
                resting.extend(v.pr.pr_key for v in candidates if v.pr.number not in changed)
                # The marks move past these now: this tick must re-read them, whatever else.
                self.watch_changed.update(v.pr.pr_key for v in candidates if v.pr.number in changed)
        resting.extend(v.pr.pr_key for repo, candidates in by_repo.items()
                       if repo not in watched and backed(repo) for v in candidates)
        resting.extend(at_work)
        # The share of resting PRs re-read anyway, so each is re-read once per full_sync_seconds.
        due_by = now - timedelta(seconds=cfg.full_sync_seconds)
        never = datetime.min.replace(tzinfo=now.tzinfo)
        overdue = sorted((k for k in resting if self.polled_at.get(k, never) <= due_by),
                         key=lambda k: self.polled_at.get(k, never))
        share = math.ceil(len(resting) * cfg.interval_seconds / cfg.full_sync_seconds)
        return set(resting) - set(overdue[:share])

    def _fresh(self, active: list[PrKey]) -> set[PrKey]:
        """The active PRs a step read from GitHub within `fresh_read_seconds` (at most half an
        interval, so the poll's own read never leaves out its next tick): that read is as recent
        as this tick's would be. A busy PR is read by its own steps, each woken by its news; the
        tick re-reads it once they go quiet. What a step read and a lost webhook missed after it
        is seen one tick later at most."""
        window = min(self.rt.config.poller.fresh_read_seconds, self.rt.config.poller.interval_seconds / 2)
        still = set(active)
        read_at = self.rt.read_at
        for key in [k for k in read_at if k not in still]:
            del read_at[key]
        if window <= 0:
            return set()
        since = time.monotonic() - window
        return {k for k in active if read_at.get(k, since) > since}

    async def _busy(self, active: list[PrKey]) -> set[PrKey]:
        """The active PRs with a job queued to run within the interval, left out of this tick
        (not of two in a row): a re-read queued now would wait behind that work. Under a backlog
        the re-reads queued behind the PRs' own work were most of the queue (1,000 PRs at once:
        about 1,000 syncs every tick). A job put off longer (a backoff through a GitHub outage)
        does not count: its PR is re-read as usual."""
        if self.rt.config.poller.fresh_read_seconds <= 0:
            return set()
        soon = utcnow() + timedelta(seconds=self.rt.config.poller.interval_seconds)
        busy = await jobs.busy_pr_keys(self.rt.db, soon) & set(active)
        # Left out one tick at most in a row: a job that stays queued (a backlog of fixer runs)
        # must not keep its PR from the re-read that would see it closed.
        self.busy_last = busy - self.busy_last
        return self.busy_last

    def _within_budget(self, views: list[PrView], active: list[PrKey]) -> list[PrKey]:
        """The PRs this tick may re-read. Idle re-reads compete with PRs that have news for one
        rate limit: while the tick's expected cost fits above the reserve every PR is polled;
        past that, only `idle_allowance` of them, the least recently synced first, and the rest
        wait for a later tick (webhooks and decisions still wake PRs with news at once)."""
        self.deferred = 0
        budget = self.rt.rate_budget
        cost = self.expected_cost()
        bucket = budget.bucket("core")
        if bucket is None or budget.unmetered:
            return active
        if len(active) * cost <= bucket.remaining - budget.reserve("core"):
            return active
        allowed = budget.idle_allowance(cost=cost)
        synced = {v.pr.pr_key: v.pr.synced_at for v in views}
        oldest = sorted(active, key=lambda k: (synced.get(k) is not None, synced.get(k) or 0))
        self.deferred = max(0, len(active) - allowed)
        metrics.IDLE_POLLS_DEFERRED.inc(self.deferred)
        log.warning("poller.budget", allowed=allowed, deferred=self.deferred, remaining=bucket.remaining,
                    reserve=budget.reserve("core"), cost=round(cost, 3))
        return oldest[:allowed]

    def expected_cost(self) -> float:
        """Rate-limited requests one re-read is expected to spend: three GETs, of which those
        answered 304 (unchanged) cost nothing, by what this client saw so far."""
        gh = self.rt.github
        gets, unchanged = getattr(gh, "gets", 0), getattr(gh, "gets_not_modified", 0)
        changed = (gets - unchanged) / gets if gets >= 30 else 1.0
        return max(0.05, 3 * changed)

    async def finish(self) -> None:
        """Return once no tick is running (a shutdown waits for the tick under way instead of
        cancelling it halfway)."""
        async with self._ticking:
            pass

    async def _settle_restore(self) -> None:
        """On a restored backup, trust the database's memory again once it has caught up with
        GitHub (`backup.restore_settled`) and a scan begun in this process, after the restore,
        has read every repository: a PR enrolled after the backup was taken is one the database
        forgot, and the scan is what finds it again (bot/intake/scan.py). From then on a job is
        a first try only if decided after it (`outbox.first_try`): one decided from the restored
        memory, queued while the bot still looked, looks when it runs."""
        restore = outbox.MEMORY.restore
        if restore is None:
            return
        if self.rt.config.scan.enabled and self.rt.scan_started_at is None:
            return
        updates = None if self.rt.config.github.dry_run else outbox.effect_key_prefix("check_run")
        if await backup.restore_settled(self.rt.db, restore, check_run_jobs=updates):
            outbox.MEMORY.since = utcnow()
            outbox.MEMORY.restore = None
            log.info("database.restore_settled", taken_at=restore.taken_at.isoformat())

    async def _leads(self) -> bool:
        """Whether this replica polls: one poller runs per database (docs/architecture.md,
        "Replicas"). A follower's tick counts as a healthy poll, and it forgets what it knew of
        the repositories: if it leads later, it starts from the marks the leader saved."""
        leads = await self.rt.leadership.holds()
        if not leads and self.rt.health.leader is not False:
            log.info("poller.follower")
        self.rt.health.leader = leads
        if not leads:
            self.watch, self.polled_at, self.busy_last = RepoWatch(self.rt.github), {}, set()
            self.rt.read_at.clear()  # only the leader's poll reads it
            self.rt.health.last_poll_at, self.rt.health.last_poll_error = utcnow(), None
        return leads

    async def _retain(self) -> None:
        """One batch of each kind of history past its time (storage/retention.py): a long
        backlog (a first run on an old database) goes a batch a tick, never in one transaction."""
        swept = await retention.sweep(self.rt.db, retention_settings(self.rt.config.retention), utcnow())
        for kind, n in swept.as_dict().items():
            if n and kind != "text_bytes_freed":
                metrics.RETENTION_REMOVED.labels(kind).inc(n)
        if swept.anything:
            log.info("retention.swept", **swept.as_dict())

    async def tick(self) -> None:
        async with self._ticking:
            await self._tick()

    async def _tick(self) -> None:
        stamp = utcnow().strftime("%Y%m%dT%H%M%S.%f")
        try:
            if not await self._leads():
                return
            self.ticks += 1
            views = await prs.list_unfinished(self.rt.db)
            active = []
            for view in views:
                pr = view.pr
                if pr.process_key is None and view.derived_status not in ("converged", "merged", "abandoned"):
                    # A crash between insert and key publish left it keyless: resume it.
                    await submit_pr(self.rt.db, pr.pr_key, SubmitOptions(
                        max_rounds=pr.max_rounds, converge_only=pr.converge_only, submitted_by="poller"))
                    continue
                if view.resubmittable:
                    continue
                active.append(pr.pr_key)
            resting = await self._resting(views, active)
            read = self._fresh(active) - self.watch_changed
            fresh = read | (await self._busy(active) - self.watch_changed)
            self.fresh = len(fresh)
            self.skipped = len(resting)
            metrics.IDLE_POLLS_SKIPPED.inc(self.skipped)
            polled = self._within_budget(views, [k for k in active if k not in resting and k not in fresh])
            # One transaction and a few multi-row statements for the whole tick. A PR whose sync
            # is still queued gets no second one: the queue stays one job per PR however slow
            # the workers are.
            async with self.rt.db.session() as s:
                self.queued = await jobs.enqueue_per_pr(s, JobKind.SYNC, polled, lambda key: f"poll:{key}:{stamp}")
                # The marks move on with the syncs they asked for, or not at all.
                await marks.save_in(s, self.watch.marks_looked())
            self.watch.accept()
            still = set(active)
            self.polled_at = {k: t for k, t in self.polled_at.items() if k in still}
            # A PR a step just read counts as re-read for the full-sync share (left out, it
            # would stay the most overdue and take the share from the others).
            self.polled_at.update(dict.fromkeys([*polled, *read], utcnow()))
            await liveness.check(self.rt, active)
            await self._settle_restore()
            self.rt.health.runaway = await paused(self.rt)
            await self._retain()
        except Exception as e:
            self.rt.health.last_poll_error = f"{type(e).__name__}: {e}"
            duty_failed(log, "poller.failed", e)
            return
        self.rt.health.last_poll_at = utcnow()
        self.rt.health.last_poll_error = None
        metrics.POLLS.inc()
        metrics.ACTIVE_PRS.set(len(active))
        metrics.RUNAWAY_PRS.set(len(self.rt.health.runaway))
        log.info("poller.tick", active=len(active), queued=self.queued, deferred=self.deferred,
                 resting=self.skipped, fresh=self.fresh, tick=self.ticks)
        self.rt.wake_workers()
