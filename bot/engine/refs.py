"""Sync jobs: re-read a PR (or the PRs at a ref) from GitHub and record what changed."""

from __future__ import annotations

import json
import time
from typing import Any

import structlog

from bot.engine.dispatch import requeue
from bot.engine.observe import Observation
from bot.github.errors import NotFound, Unavailable
from bot.runtime.context import Runtime
from storage import prs
from storage.keys import PrKey
from storage.models import Job, PullRequest, utcnow

log = structlog.get_logger(__name__)


async def read_observation(rt: Runtime, pr_key: PrKey) -> Observation:
    key = pr_key
    gh = rt.github
    pr = await gh.pull(key.owner, key.repo, key.number)
    head_repo = ((pr.get("head") or {}).get("repo") or {}).get("full_name") or key.full_repo
    owner, _, repo = head_repo.partition("/")
    try:
        # A fork's branch through the base repository's installation: the fork's account may
        # have none (client.branch_head).
        head = await gh.branch_head(owner, repo, pr["head"]["ref"], via=key.full_repo)
    except (NotFound, Unavailable) as e:
        # Fail open: an unreadable ref is not a reason to act; the PR object's sha stands in.
        log.warning("sync.head_unreadable", pr_key=pr_key, error=str(e))
        head = None
    reviews = await gh.reviews(key.owner, key.repo, key.number)
    latest = max((r["id"] for r in reviews if isinstance(r.get("id"), int)), default=None)
    return Observation(pr=pr, head_sha=head, latest_review_id=latest, read_at=utcnow(), reviews=tuple(reviews))


async def read_tracked(rt: Runtime, pr_key: PrKey) -> tuple[Observation, bool]:
    """`read_observation`, and whether GitHub answered 304 to every one of its reads: nothing
    changed on GitHub since this process last read the PR."""
    with rt.github.tracking_reads() as reads:
        seen = await read_observation(rt, pr_key)
    rt.read_at[pr_key] = time.monotonic()
    return seen, reads.all_unchanged


def records_nothing_new(row: PullRequest, values: dict[str, Any]) -> bool:
    """Whether the row holds every observed value already (the read time aside): writing the
    observation would change nothing but `synced_at`."""
    return all(getattr(row, name) == value for name, value in values.items() if name != "synced_at")


async def sync_ref(rt: Runtime, job: Job) -> None:
    """A status, check or push names a sha or branch: wake the enrolled PRs sitting there."""
    ref = json.loads(job.payload)
    for view in await prs.active_at(rt.db, ref["repo"], sha=ref.get("sha"), branch=ref.get("branch")):
        async with rt.db.session() as s:
            await requeue(s, view.pr.pr_key, job.key, once=True)
    rt.wake_workers()
