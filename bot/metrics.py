"""Prometheus metrics of the process (served at /metrics)."""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

import httpx
from prometheus_client import REGISTRY, Counter, Gauge, Histogram, Info
from prometheus_client.core import GaugeMetricFamily
from sqlalchemy import case, func
from sqlmodel import col, select

from storage import events
from storage.jobs import JobStatus
from storage.keys import PrKey
from storage.models import Job, PullRequest
from storage.statuses import JobKind, Status

if TYPE_CHECKING:
    from bot.github.ratebudget import RateBudget
    from storage.database import Database

WEBHOOKS = Counter(
    "convergebot_webhook_deliveries_total", "Webhook deliveries by event and outcome", ["event", "outcome"]
)
REDELIVERIES = Counter(
    "convergebot_webhook_redeliveries_total",
    "Webhook deliveries asked of GitHub again from a delivery log (the App's or a named hook's), "
    "by result (asked, refused)",
    ["result"])
JOBS = Counter("convergebot_jobs_total", "Jobs finished by kind and result", ["kind", "result"])
# Up to an hour: a fix job runs the agent for minutes, a sync takes a fraction of a second.
JOB_SECONDS = Histogram("convergebot_job_seconds", "Job handler duration", ["kind"],
                        buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600))
JOBS_LOOK_FAILURES = Counter(
    "convergebot_jobs_look_failures_total",
    "Workers' looks for work that failed (the database unreachable), each followed by a longer pause")
JOBS_QUEUED = Gauge("convergebot_jobs_queued",
                    "Jobs in the queue by kind, counted at each scrape (due now or later)", ["kind"])
JOBS_DUE = Gauge("convergebot_jobs_due", "Queued jobs whose time has come, by kind, at each scrape", ["kind"])
JOBS_RUNNING = Gauge("convergebot_jobs_running", "Jobs a worker holds, by kind, at each scrape", ["kind"])
OLDEST_DUE_JOB = Gauge(
    "convergebot_oldest_due_job_seconds",
    "How long the longest-waiting due job has been due, by kind, at each scrape (0: none due)", ["kind"])
LEADER = Gauge("convergebot_leader",
               "1 while this replica runs the periodic duties (poller, scans, redelivery), 0 while "
               "another does; set at each scrape from its last poll tick")
BUILD = Info("convergebot_build", "The running build: its version, its source revision and Python's")
POLLS = Counter("convergebot_polls_total", "Poller ticks")
ACTIVE_PRS = Gauge("convergebot_active_prs", "PRs with an active run at the last poll")
GITHUB_RATE_LIMITED = Counter("convergebot_github_rate_limited_total", "Jobs re-scheduled for a rate limit")
LIVENESS_HEALED = Counter(
    "convergebot_liveness_healed_total", "Active PRs the watchdog found with nothing to move them, and healed")
EFFECTS = Counter("convergebot_effects_total", "GitHub writes of the outbox by effect and result", ["effect", "result"])
DRY_RUN_SUPPRESSED = Counter(
    "convergebot_dry_run_suppressed_total",
    "GitHub writes decided but not made because github.dry_run is on, by kind (an effect, or fix)", ["kind"])
RUNAWAY_PRS = Gauge("convergebot_runaway_prs", "PRs paused at their write budget at the last poll")
IDLE_POLLS_DEFERRED = Counter(
    "convergebot_idle_polls_deferred_total", "Idle PR re-reads the poller put off to keep the rate-limit budget")


IDLE_POLLS_SKIPPED = Counter(
    "convergebot_idle_polls_skipped_total",
    "Re-reads of PRs waiting for a review the poller left out because their repository's PR list was unchanged")
AGENT_COST = Counter(
    "convergebot_agent_cost_usd_total",
    "Dollars the fixer's agent spent, as its CLI reported them (or its tokens at the configured "
    "prices), by fixer", ["fixer"])
AGENT_TOKENS = Counter("convergebot_agent_tokens_total", "Tokens the fixer's agent used, by fixer and direction",
                       ["fixer", "direction"])
AGENT_SECONDS = Histogram(
    "convergebot_agent_seconds", "Wall time of each run of the fixer's agent, by fixer", ["fixer"],
    buckets=(5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600))
AGENT_FAILURES = Counter(
    "convergebot_agent_failures_total",
    "Runs of the fixer's agent that changed nothing and whose CLI reported failed edits or tool calls, "
    "or exited without a word", ["fixer"])
AGENT_BUDGET_WAITS = Counter(
    "convergebot_agent_budget_waits_total",
    "Fixer runs put off or escalated at an agent budget, by budget (run_cost, run_minutes, hour_cost)",
    ["budget"])
RETENTION_REMOVED = Counter(
    "convergebot_retention_removed_total",
    "History retention removed: rows deleted (jobs, deliveries, commands) or compacted (runs, rounds, escalations)",
    ["kind"])
SCANS = Counter("convergebot_scans_total", "Repository scans run (for enrollment intent no webhook brought)")
SCAN_JOBS = Counter("convergebot_scan_jobs_total", "Jobs the repository scan queued, by kind", ["kind"])


class _RateBudgetCollector:
    """The GitHub rate-limit budget per resource, read from the process's client at each scrape."""

    budget: RateBudget | None = None

    def collect(self):
        families = {
            "remaining": GaugeMetricFamily("convergebot_github_rate_remaining",
                                           "Requests left in the window, as GitHub last reported", labels=["resource"]),
            "limit": GaugeMetricFamily("convergebot_github_rate_limit", "Requests per window", labels=["resource"]),
            "used": GaugeMetricFamily("convergebot_github_rate_used", "Requests spent in the window",
                                      labels=["resource"]),
            "reset_in_seconds": GaugeMetricFamily("convergebot_github_rate_reset_seconds",
                                                  "Seconds until the window resets", labels=["resource"]),
            "reserve": GaugeMetricFamily("convergebot_github_rate_reserve",
                                         "Requests kept for PRs with news: idle polls never spend them",
                                         labels=["resource"]),
        }
        idle = GaugeMetricFamily("convergebot_github_rate_idle_allowance",
                                 "Requests idle polls may spend in the current poll interval", labels=["resource"])
        budget = self.budget
        if budget is not None:
            for resource, values in budget.snapshot().items():
                for name, family in families.items():
                    family.add_metric([resource], values[name])
                idle.add_metric([resource], budget.idle_allowance(resource=resource))
        yield from families.values()
        yield idle


_RATE_BUDGET = _RateBudgetCollector()
REGISTRY.register(_RATE_BUDGET)


class _MemoryCollector:
    """What the process keeps in memory, read at each scrape: the entries of each bounded map
    (`track_memory`), and the HTTP cache's answers and bytes (`track_http_cache`)."""

    def __init__(self) -> None:
        self.sizers: dict[str, Callable[[], int]] = {}
        self.http_cache: Callable[[], tuple[int, int]] | None = None

    def collect(self):
        entries = GaugeMetricFamily("convergebot_memory_entries", "Entries in each of the process's in-memory maps "
                                    "(each bounded by a count, or by the PRs still being driven)", labels=["map"])
        for name, size in sorted(self.sizers.items()):
            entries.add_metric([name], size())
        cache = self.http_cache() if self.http_cache is not None else (0, 0)
        entries.add_metric(["http_cache"], cache[0])
        yield entries
        held = GaugeMetricFamily("convergebot_http_cache_bytes",
                                 "What the HTTP cache's answers count for (bodies and a fixed allowance each), "
                                 "bounded by [github] http_cache_megabytes")
        held.add_metric([], cache[1])
        yield held


_MEMORY = _MemoryCollector()
REGISTRY.register(_MEMORY)


def track_memory(name: str, size: Callable[[], int]) -> None:
    """A map /metrics reports the size of, as `convergebot_memory_entries{map=name}`."""
    _MEMORY.sizers[name] = size


def track_http_cache(sizes: Callable[[], tuple[int, int]]) -> None:
    _MEMORY.http_cache = sizes


def track_rate_budget(budget: RateBudget) -> None:
    """The budget /metrics reports (the process's GitHub client's)."""
    _RATE_BUDGET.budget = budget


# -- what the bot did (label values are kinds, verdicts and route templates: never a PR or sha) --

ROUNDS = Counter("convergebot_rounds_started_total",
                 "Rounds started (or restarted at a new head), by kind (review, conflict, ci)", ["kind"])
ESCALATIONS = Counter("convergebot_escalations_total", "Escalations asked of the maintainers, by kind",
                      ["kind"])
MERGES = Counter("convergebot_merges_total", "PRs merged by the bot, by how (merge, merge_queue)", ["how"])
FIXER_RUNS = Counter("convergebot_fixer_runs_total",
                     "Fixer runs recorded, by verdict (husk: the fixer never finished)", ["verdict"])
GITHUB_REQUESTS = Counter(
    "convergebot_github_requests_total",
    "GitHub API requests by method, route template and status (304: answered from the cache after "
    "GitHub said unchanged; error, timeout: no answer)", ["method", "route", "status"])
WEBHOOK_TO_ACTION = Histogram(
    "convergebot_webhook_to_action_seconds",
    "From a new webhook delivery's recording to the end of the first job of a PR it woke that "
    "started after it, in the same process",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300))
PRS = Gauge("convergebot_prs", "PRs by status, counted at each scrape", ["status"])
OLDEST_WAIT = Gauge("convergebot_oldest_wait_seconds",
                    "The longest any active PR has waited, by what it waits on (bot/rules/waiting.py), "
                    "at each scrape; 0 where none waits so", ["kind"])

_ON_COMMIT = {"round_started": ROUNDS, "escalated": ESCALATIONS}


def _committed(name: str, label: str) -> None:
    counter = _ON_COMMIT.get(name)
    if counter is not None:
        counter.labels(label).inc()


events.listen(_committed)


def github_request(method: str, route: str, answer: Any) -> None:
    """One request `Transport._call` sent (its method and route template), by the status GitHub
    answered: `answer` is the githubkit response, the failed request's httpx response, or a
    word when there was none."""
    raw = getattr(answer, "raw_response", answer)
    if isinstance(raw, httpx.Response):
        status = "304" if raw.extensions.get("hishel_from_cache") else str(raw.status_code)
    else:
        status = answer if isinstance(answer, str) else "error"
    GITHUB_REQUESTS.labels(method, route, status).inc()


def fixer_verdict(status: str, finished: bool) -> None:
    FIXER_RUNS.labels(status if finished else "husk").inc()


def merged(how: str, won: bool) -> None:
    """A merge, counted when `won`: the caller's write is the one that recorded it."""
    MERGES.labels(how).inc(1 if won else 0)


# PR → when a webhook delivery that woke it was recorded (monotonic), until a job acts on it.
_woken: dict[str, float] = {}
# A PR woken here whose job runs elsewhere (another replica) or never (not enrolled) is never
# observed: the oldest are dropped past this many, so the dict stays bounded.
WOKEN_MAX = 10_000


def webhook_woke(pr_keys: Iterable[str | None]) -> None:
    now = time.monotonic()
    for key in pr_keys:
        if key is not None:
            _woken.setdefault(key, now)
    if len(_woken) > WOKEN_MAX:
        for key in sorted(_woken, key=_woken.__getitem__)[:len(_woken) - WOKEN_MAX]:
            del _woken[key]


def job_done(pr_key: PrKey | None, started: float) -> None:
    """A job of the PR finished: the webhook latency, if it started after the PR was woken."""
    if pr_key is None:
        return
    woken = _woken.get(pr_key)
    if woken is not None and started >= woken:
        del _woken[pr_key]
        WEBHOOK_TO_ACTION.observe(time.monotonic() - woken)


def _build() -> dict[str, str]:
    try:
        ours = version("convergebot")
    except PackageNotFoundError:  # run from a tree that was never installed
        ours = "unknown"
    # The image sets CONVERGEBOT_REVISION from its build argument (Dockerfile); a tree run by
    # hand says unknown rather than ask git at every start.
    return {"version": ours, "revision": os.environ.get("CONVERGEBOT_REVISION", "unknown"),
            "python": platform.python_version()}


BUILD.info(_build())


async def count_jobs(db: Database, now: datetime) -> None:
    """The queue's gauges from two GROUP BYs over the queued and running jobs (every kind, 0
    when none), through the (status, kind, run_at) index."""
    due = col(Job.run_at) <= now
    by_status = (select(Job.kind, Job.status, func.count(), func.min(case((due, Job.run_at), else_=None)))
                 .where(col(Job.status).in_((JobStatus.QUEUED, JobStatus.RUNNING)))
                 .group_by(Job.kind, Job.status))
    due_now = select(Job.kind, func.count()).where(Job.status == JobStatus.QUEUED, due).group_by(Job.kind)
    async with db.read_session() as s:
        rows = (await s.exec(by_status)).all()
        due_counts = {str(kind): n for kind, n in (await s.exec(due_now)).all()}
    kinds = {kind.value for kind in JobKind} | {str(kind) for kind, *_ in rows}
    queued = {str(kind): n for kind, status, n, _ in rows if status == JobStatus.QUEUED}
    running = {str(kind): n for kind, status, n, _ in rows if status == JobStatus.RUNNING}
    oldest = {str(kind): at for kind, status, _, at in rows if status == JobStatus.QUEUED and at is not None}
    for kind in kinds:
        JOBS_QUEUED.labels(kind).set(queued.get(kind, 0))
        JOBS_DUE.labels(kind).set(due_counts.get(kind, 0))
        JOBS_RUNNING.labels(kind).set(running.get(kind, 0))
        at = oldest.get(kind)
        OLDEST_DUE_JOB.labels(kind).set(max(0.0, (now - at).total_seconds()) if at is not None else 0.0)


def leader(is_leader: bool | None) -> None:
    """`convergebot_leader` from the replica's last poll tick (None: not asked yet, shown as 0)."""
    LEADER.set(1 if is_leader else 0)


async def count_prs(db: Database) -> None:
    """`convergebot_prs` from one GROUP BY over the PR rows (every status, 0 when none)."""
    async with db.read_session() as s:
        rows = (await s.exec(select(PullRequest.status, func.count()).group_by(PullRequest.status))).all()
    counts = {str(status): n for status, n in rows}
    for status in Status:
        PRS.labels(status.value).set(counts.pop(status.value, 0))
    for other, n in counts.items():
        PRS.labels(other).set(n)


def oldest_waits(kinds: Iterable[str], ages: Mapping[str, float]) -> None:
    """`convergebot_oldest_wait_seconds`: each kind's oldest wait in seconds (0 where none)."""
    for kind in kinds:
        OLDEST_WAIT.labels(kind).set(ages.get(kind, 0.0))
