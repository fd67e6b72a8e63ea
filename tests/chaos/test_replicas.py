"""Two and three `convergebot serve` replicas on one PostgreSQL database, the leader SIGKILLed
mid-run: one run per PR, one review request per round, one poller at a time, every PR merged
once. Size from CONVERGEBOT_REPLICA_PRS (20)."""

from __future__ import annotations

import os

import pytest

from .replicas import run_replicas

PRS = int(os.environ.get("CONVERGEBOT_REPLICA_PRS", "20"))
DEADLINE = 180.0 + 6 * PRS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(int(DEADLINE * 2 + 120))]


def _segments(owners: list[int]) -> list[int]:
    """Runs of consecutive poller cycles by one replica, as the replica of each run."""
    return [o for i, o in enumerate(owners) if i == 0 or owners[i - 1] != o]


@pytest.mark.parametrize("replicas", [2, 3])
async def test_replicas_share_the_work_and_nothing_is_done_twice(replicas, db_url, tmp_path):
    if not db_url.startswith("postgresql"):
        pytest.skip("replicas need PostgreSQL: a SQLite file serves one process")
    r = await run_replicas(replicas, PRS, db_url, tmp_path, deadline=DEADLINE)
    print(f"\n{r.summary()}\nlogs: {tmp_path}")
    assert not r.not_merged, r.summary()
    assert r.enroll_outcomes == {"started": PRS, "already_running": PRS * (replicas - 1)}, r.summary()
    assert set(r.runs_per_pr.values()) == {1}, r.runs_per_pr
    over = {k: (n, r.rounds_per_pr[k]) for k, n in r.requests_per_pr.items() if n > r.rounds_per_pr[k]}
    assert not over, f"review requests beyond one per round (requests, rounds): {over}"
    assert set(r.merges_per_pr.values()) == {1}, r.merges_per_pr
    assert not r.duplicates, r.duplicates[:10]
    # One poller at a time: the first leader's cycles, then (it was killed) the next one's.
    assert r.leaderships_taken[0] == r.killed and len(r.leaderships_taken) == 2, r.summary()
    assert _segments(r.tick_owners) == r.leaderships_taken, r.summary()
    # Every replica took webhooks from the balancer (the work was shared, not one replica's).
    assert len(r.webhooks_by_replica) == replicas, r.summary()
