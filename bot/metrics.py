"""Prometheus metrics of the process (served at /metrics)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily

if TYPE_CHECKING:
    from .ratebudget import RateBudget

WEBHOOKS = Counter(
    "convergebot_webhook_deliveries_total", "Webhook deliveries by event and outcome", ["event", "outcome"]
)
REDELIVERIES = Counter(
    "convergebot_webhook_redeliveries_total",
    "Webhook deliveries asked of GitHub again from the App's delivery log, by result (asked, refused)",
    ["result"])
JOBS = Counter("convergebot_jobs_total", "Jobs finished by kind and result", ["kind", "result"])
JOB_SECONDS = Histogram("convergebot_job_seconds", "Job handler duration", ["kind"])
POLLS = Counter("convergebot_polls_total", "Poller ticks")
ACTIVE_PRS = Gauge("convergebot_active_prs", "PRs with an active run at the last poll")
GITHUB_RATE_LIMITED = Counter("convergebot_github_rate_limited_total", "Jobs re-scheduled for a rate limit")
LIVENESS_HEALED = Counter(
    "convergebot_liveness_healed_total", "Active PRs the watchdog found with nothing to move them, and healed")
EFFECTS = Counter("convergebot_effects_total", "GitHub writes of the outbox by effect and result", ["effect", "result"])
RUNAWAY_PRS = Gauge("convergebot_runaway_prs", "PRs paused at their write budget at the last poll")
IDLE_POLLS_DEFERRED = Counter(
    "convergebot_idle_polls_deferred_total", "Idle PR re-reads the poller put off to keep the rate-limit budget")


IDLE_POLLS_SKIPPED = Counter(
    "convergebot_idle_polls_skipped_total",
    "Re-reads of PRs waiting for a review the poller left out because their repository's PR list was unchanged")
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


def track_rate_budget(budget: RateBudget) -> None:
    """The budget /metrics reports (the process's GitHub client's)."""
    _RATE_BUDGET.budget = budget
