"""The reads that must not scan the history use an index on both backends: a delivery's active
PRs at a head (the repository compared in any case), the deliveries' prune, open escalations, a
PR's commands and who waits on a PR (migration 0013); a page of the list, in its order and of
the working set's recently changed (migration 0014)."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from storage.database import Database

pytestmark = pytest.mark.filterwarnings("ignore:autogenerate skipping metadata-specified expression-based index")

READS = {
    "ix_pull_requests_repo_head_sha":
        "SELECT pr_key FROM pull_requests WHERE lower(repo) = lower('Acme/App') AND head_sha = 'abc'",
    "ix_pull_requests_repo_head_branch":
        "SELECT pr_key FROM pull_requests WHERE lower(repo) = lower('Acme/App') AND head_branch = 'fix'",
    "ix_webhook_deliveries_received_at":
        "SELECT delivery_id FROM webhook_deliveries WHERE received_at < '2026-01-01'",
    "ix_escalations_status": "SELECT id FROM escalations WHERE status = 'open'",
    "ix_commands_pr_key": "SELECT id FROM commands WHERE pr_key = 'acme/app#1'",
    "ix_dependencies_depends_on_key": "SELECT pr_key FROM dependencies WHERE depends_on_key = 'acme/app#1'",
    "ix_pull_requests_created_at":
        "SELECT pr_key FROM pull_requests WHERE created_at > '2026-01-01' ORDER BY created_at, pr_key LIMIT 101",
    "ix_pull_requests_updated_at": "SELECT pr_key FROM pull_requests WHERE updated_at >= '2026-01-01'",
}


@pytest.mark.parametrize("index", sorted(READS))
async def test_the_read_uses_its_index(db: Database, index: str):
    async with db.engine.connect() as conn:
        if db.is_postgres:
            # An empty table is read whole by a planner left to itself: ask whether it can use the index.
            await conn.execute(text("SET enable_seqscan = off"))
            plan = (await conn.execute(text(f"EXPLAIN {READS[index]}"))).scalars().all()
        else:
            plan = [row[-1] for row in (await conn.execute(text(f"EXPLAIN QUERY PLAN {READS[index]}"))).all()]
    # The two heads' indexes both lead with the repository: a planner may take either for either.
    wanted = "ix_pull_requests_repo_head" if index.startswith("ix_pull_requests_repo_head") else index
    assert any(wanted in line for line in plan), plan
    assert not any("Seq Scan" in line or line.startswith("SCAN ") for line in plan), plan
