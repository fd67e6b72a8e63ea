"""Prometheus metrics of the process (served at /metrics)."""

from prometheus_client import Counter, Gauge, Histogram

WEBHOOKS = Counter(
    "convergebot_webhook_deliveries_total", "Webhook deliveries by event and outcome", ["event", "outcome"]
)
JOBS = Counter("convergebot_jobs_total", "Jobs finished by kind and result", ["kind", "result"])
JOB_SECONDS = Histogram("convergebot_job_seconds", "Job handler duration", ["kind"])
POLLS = Counter("convergebot_polls_total", "Poller ticks")
ACTIVE_PRS = Gauge("convergebot_active_prs", "PRs with an active run at the last poll")
GITHUB_RATE_LIMITED = Counter("convergebot_github_rate_limited_total", "Jobs re-scheduled for a rate limit")
LIVENESS_HEALED = Counter(
    "convergebot_liveness_healed_total", "Active PRs the watchdog found with nothing to move them, and healed")
EFFECTS = Counter("convergebot_effects_total", "GitHub writes of the outbox by effect and result", ["effect", "result"])
RUNAWAY_PRS = Gauge("convergebot_runaway_prs", "PRs paused at their write budget at the last poll")
