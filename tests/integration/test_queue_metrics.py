"""/metrics' queue gauges (depth, due, running and the oldest due job by kind), the leader gauge
and the build's info, read from a real database as a scrape does."""

from __future__ import annotations

from datetime import timedelta

from prometheus_client import REGISTRY

from bot import metrics
from storage import jobs
from storage.models import utcnow
from storage.statuses import JobKind


def _gauge(name: str, kind: str) -> float | None:
    return REGISTRY.get_sample_value(name, {"kind": kind})


async def test_the_queue_gauges_count_queued_due_running_and_the_oldest_due_by_kind(db):
    now = utcnow()
    for i, minutes in enumerate((-10, -2, 30)):  # two due, 10 and 2 minutes ago; one not yet
        await jobs.enqueue(db, JobKind.SYNC, f"sync-{i}", run_at=now + timedelta(minutes=minutes))
    await jobs.enqueue(db, JobKind.FIX, "fix-0", run_at=now - timedelta(minutes=1))
    claimed = await jobs.claim(db, "worker-1", lease_seconds=60, kinds=[JobKind.FIX])
    assert claimed is not None and claimed.kind == JobKind.FIX

    await metrics.count_jobs(db, now)

    assert _gauge("convergebot_jobs_queued", "sync") == 3
    assert _gauge("convergebot_jobs_due", "sync") == 2
    assert 590 <= (_gauge("convergebot_oldest_due_job_seconds", "sync") or 0) <= 610
    assert _gauge("convergebot_jobs_running", "sync") == 0
    assert _gauge("convergebot_jobs_queued", "fix") == 0
    assert _gauge("convergebot_jobs_running", "fix") == 1
    assert _gauge("convergebot_oldest_due_job_seconds", "fix") == 0
    # Every kind is reported, 0 where none is queued: a dashboard sees the series from the start.
    assert _gauge("convergebot_jobs_queued", "effect") == 0

    # A job that finishes leaves the gauges at the next scrape.
    assert await jobs.complete(db, claimed)
    await metrics.count_jobs(db, now)
    assert _gauge("convergebot_jobs_running", "fix") == 0


def test_the_leader_gauge_and_the_build_info():
    metrics.leader(True)
    assert REGISTRY.get_sample_value("convergebot_leader") == 1
    metrics.leader(None)  # not asked yet: not the leader
    assert REGISTRY.get_sample_value("convergebot_leader") == 0
    build = [s for f in REGISTRY.collect() if f.name == "convergebot_build" for s in f.samples]
    assert len(build) == 1 and set(build[0].labels) == {"version", "revision", "python"}
    assert build[0].labels["version"] not in ("", None)


def test_job_durations_are_bucketed_up_to_an_hour():
    def bucket(le: str) -> float:
        return REGISTRY.get_sample_value("convergebot_job_seconds_bucket", {"kind": "fix", "le": le}) or 0.0

    before = {le: bucket(le) for le in ("1200.0", "1800.0", "3600.0")}
    metrics.JOB_SECONDS.labels("fix").observe(1500)  # a 25-minute fix job
    assert bucket("1200.0") - before["1200.0"] == 0
    assert bucket("1800.0") - before["1800.0"] == 1
    assert bucket("3600.0") - before["3600.0"] == 1
