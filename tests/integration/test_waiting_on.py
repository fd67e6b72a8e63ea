"""Waiting on whom, since when: every active status has a `waiting_on` and a `waiting_since`,
the same in `status --json`, GET /api/prs and GET /api/prs/{owner}/{repo}/{number}, read from the
row and its round alone (bot/rules/waiting.py); /metrics has the oldest wait per kind."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import UTC, datetime

import pytest

from bot.rules.merge import CHECKS_UNREPORTED
from storage import dependencies, prs, rounds
from storage.database import Database
from storage.keys import parse_pr_key
from storage.models import utcnow

from ..helpers import enroll
from ..serving import make_config, serving
from .test_cli import convergebot

KEY = "octo/repo#9"
DEP = "octo/lib#1"
T = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


async def _row(db: Database, status: str) -> str | None:
    """The PR in `status` as the engine leaves it there; the `waiting_since` it should show (None:
    the row's `updated_at`)."""
    pk = await enroll(db, KEY, title="Change", url="https://github.com/octo/repo/pull/9")
    values: dict = {"status": status, "head_sha": "b" * 40}
    since: str | None = T.isoformat()
    if status == "waiting_review":
        values |= {"waiting_since": T, "last_round_head": "b" * 40}
    elif status == "converging":
        async with db.session() as s:
            await rounds.start(s, KEY, pk, 1, "b" * 40)
            await rounds.update_round(s, KEY, pk, 1, {"fixer_started_at": T, "fixer": "fake"})
    elif status == "escalated":
        values |= {"escalated_at": T}
    elif status == "waiting_deps":
        await dependencies.replace_for(db, parse_pr_key(KEY), [parse_pr_key(DEP)])
        values |= {"converged_at": T, "converged_head": "b" * 40}
    elif status == "waiting_merge":
        values |= {"converged_at": T, "converged_head": "b" * 40, "waiting_since": T,
                   "last_action": CHECKS_UNREPORTED + "ci/test"}
    elif status == "waiting_merge_queue":
        values |= {"status": "waiting_merge", "converged_at": T, "converged_head": "b" * 40, "merge_group": "c" * 40}
    elif status == "merging":
        values |= {"converged_at": T, "converged_head": "b" * 40}
        since = None
    assert await prs.fenced_update(db, KEY, pk, values)
    return since


EXPECTED = {
    "waiting_review": ("reviewer", "reviewer: "),
    "converging": ("fixer", "fixer: fake"),
    "escalated": ("maintainer", "maintainer: a maintainer's answer"),
    "waiting_deps": ("dependency", f"dependency: {DEP}"),
    "waiting_merge": ("check", "check: ci/test"),
    "waiting_merge_queue": ("merge_queue", "merge_queue"),
    "merging": ("merge", "merge"),
}


@pytest.mark.parametrize("status", sorted(EXPECTED))
async def test_every_active_status_says_what_it_waits_on_and_since_when(db_url, status):
    async with serving(make_config(db_url)) as (rt, http):
        since = await _row(rt.db, status)
        updated = (await prs.get(rt.db, KEY)).pr.updated_at.isoformat()
        listed = (await http.get("/api/prs")).json()
        detail = (await http.get("/api/prs/octo/repo/9")).json()
        cli = await asyncio.to_thread(convergebot, db_url, "status", "--json")
        one = await asyncio.to_thread(convergebot, db_url, "status", KEY, "--json")
        table = await asyncio.to_thread(convergebot, db_url, "status")
    assert cli.returncode == 0 and one.returncode == 0, cli.stderr + one.stderr
    kind, on = EXPECTED[status]
    for row in (*listed, detail, *json.loads(cli.stdout), json.loads(one.stdout)):
        assert row["waiting_kind"] == kind, row
        assert row["waiting_on"].startswith(on), row["waiting_on"]
        assert row["waiting_since"] == (since or updated), row
    assert on in table.stdout and T.isoformat()[:19] in table.stdout or since is None


async def test_a_finished_pr_waits_on_nothing(db_url):
    async with serving(make_config(db_url)) as (rt, http):
        pk = await enroll(rt.db, KEY)
        assert await prs.fenced_update(rt.db, KEY, pk, {"status": "merged"})
        (row,) = (await http.get("/api/prs")).json()
    assert (row["waiting_on"], row["waiting_kind"], row["waiting_since"]) == (None, None, None)


async def test_metrics_show_the_oldest_wait_per_kind(db_url):
    async with serving(make_config(db_url)) as (rt, http):
        await _row(rt.db, "waiting_merge")
        text = (await http.get("/metrics")).text
    check = re.search(r'^convergebot_oldest_wait_seconds\{kind="check"\} (\S+)$', text, re.M)
    assert check and float(check.group(1)) >= (datetime.now(UTC) - T).total_seconds() - 60, text
    assert re.search(r'^convergebot_oldest_wait_seconds\{kind="reviewer"\} 0\.0$', text, re.M)


async def test_the_dashboard_marks_and_filters_the_prs_waiting_longer_than_stale_after(db_url):
    other = "octo/other#2"
    async with serving(make_config(db_url, dashboard={"stale_after_seconds": 3600})) as (rt, http):
        await _row(rt.db, "waiting_merge")  # waiting since T, long ago
        pk = await enroll(rt.db, other, title="Fresh")
        assert await prs.fenced_update(rt.db, other, pk, {"status": "escalated", "escalated_at": utcnow()})
        page = (await http.get("/")).text
        stale = (await http.get("/", params={"stale": "1"})).text
        detail = (await http.get("/prs/octo/repo/9")).text
    row = re.search(r'<tr data-pr="octo/repo#9">.*?</tr>', page, re.S).group(0)
    fresh = re.search(r'<tr data-pr="octo/other#2">.*?</tr>', page, re.S).group(0)
    assert "check: ci/test since" in row and "waiting long" in row
    assert "maintainer: a maintainer&#39;s answer since" in fresh and "waiting long" not in fresh
    assert KEY in stale and other not in stale and 'id="f-stale" name="stale" value="1" checked' in stale
    assert "waiting longer than 1 h" in page
    assert re.search(r'<dd id="waiting-on">check: ci/test since <time', detail)
