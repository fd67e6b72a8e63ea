"""The client's rate-limit budget follows the simulator's x-ratelimit-* headers, and /metrics
shows it: a 200 spends, a 304 does not, GraphQL has its own bucket, no request is made to learn it."""

from __future__ import annotations

import re

import pytest

from bot.engine.refs import read_observation
from bot.github.client import GitHubClient, open_github
from bot.github.errors import GitHubError, RateLimited
from bot.github.ratebudget import IDLE, NEWS
from storage.keys import parse_pr_key

from ..serving import make_config, serving
from ..simulator_fixtures import start_simulator

REPO = "acme/lib"
LIMIT = 40


@pytest.fixture
async def low_limit(tmp_path):
    server = await start_simulator(tmp_path / "github", rate_limit=LIMIT)
    try:
        await server.sim.create_repo(REPO)
        yield server
    finally:
        await server.stop()


def _sim_balance(sim, token: str, resource: str = "core") -> int:
    return sim.rate_limits.bucket(resource, token).remaining


async def test_the_budget_follows_the_headers_200s_spend_and_304s_do_not(low_limit):
    sim = low_limit.sim
    pr = await sim.open_pr(REPO, title="t", head="feat", author="dev", files={"a.txt": "a\n"})
    async with open_github(api_url=low_limit.url, token="t1") as gh:
        client = GitHubClient(gh)
        budget = client.rate_budget
        assert budget.snapshot() == {}

        await client.pull("acme", "lib", pr.number)
        core = budget.bucket("core")
        assert (core.limit, core.remaining, core.used) == (LIMIT, LIMIT - 1, 1)
        assert core.remaining == _sim_balance(sim, "t1")
        reset = sim.rate_limits.bucket("core", "t1").reset
        assert core.reset == reset

        # Unchanged: the read revalidates to a 304, which spends nothing.
        before = sim.counters.get(status=304)
        await client.pull("acme", "lib", pr.number)
        assert sim.counters.get(status=304) == before + 1
        assert budget.bucket("core").remaining == LIMIT - 1 == _sim_balance(sim, "t1")

        # A change: the same read is a 200 again and spends one.
        await sim.push(REPO, "feat", {"b.txt": "b\n"})
        await client.pull("acme", "lib", pr.number)
        assert budget.bucket("core").remaining == LIMIT - 2 == _sim_balance(sim, "t1")

        # GraphQL is its own bucket; an error answer (404) still spends and still reports.
        await client.review_threads("acme", "lib", pr.number)
        assert budget.bucket("graphql").remaining == LIMIT - 1 == _sim_balance(sim, "t1", "graphql")
        with pytest.raises(GitHubError):  # GraphQL errors (HTTP 200): parsed after the headers are seen
            await client.review_threads("acme", "nothing-here", 1)
        assert budget.bucket("graphql").remaining == LIMIT - 2 == _sim_balance(sim, "t1", "graphql")
        assert await client.permission("acme", "lib", "stranger") == "none"
        assert budget.bucket("core").remaining == LIMIT - 3 == _sim_balance(sim, "t1")
        assert set(budget.snapshot()) == {"core", "graphql"}

    # Knowing the budget cost nothing: no GET /rate_limit was ever made.
    assert sim.counters.get(route="/rate_limit") == 0


async def test_the_budget_reaches_zero_with_the_token_and_news_must_wait(low_limit):
    sim = low_limit.sim
    async with open_github(api_url=low_limit.url, token="t2") as gh:
        client = GitHubClient(gh)
        budget = client.rate_budget
        await client.repo("acme", "lib")
        reserve = budget.reserve()
        assert reserve == LIMIT // 5  # 20% of the limit the answer reported
        for i in range(LIMIT - reserve - 1):
            await client.permission("acme", "lib", f"user{i}")  # distinct URLs: each a 200/404
        assert budget.bucket("core").remaining == reserve
        assert not budget.may_spend(IDLE) and budget.may_spend(NEWS)
        assert budget.idle_allowance() == 0
        for i in range(reserve):
            await client.permission("acme", "lib", f"more{i}")
        assert budget.bucket("core").remaining == 0 == _sim_balance(sim, "t2")
        assert not budget.may_spend(NEWS)
        with pytest.raises(RateLimited):
            await client.permission("acme", "lib", "one-too-many")
        assert budget.bucket("core").remaining == 0
        assert budget.exhausted_for(NEWS) > 3000
        # Refused here, from the balance GitHub reported: never sent, so never refused there.
        refused = [route for route, statuses in sim.counters.snapshot()["routes"].items()
                   if "403" in statuses or "429" in statuses]
        assert refused == []


async def test_requests_in_flight_count_against_the_balance(low_limit):
    """With one request left and one already on its way, the next waits for the reset instead of
    being sent for GitHub to refuse."""
    import asyncio

    sim = low_limit.sim
    async with open_github(api_url=low_limit.url, token="t3") as gh:
        client = GitHubClient(gh)
        for i in range(LIMIT - 1):
            await client.permission("acme", "lib", f"user{i}")
        assert client.rate_budget.bucket("core").remaining == 1
        sim.inject_fault(r"/collaborators/slow/permission$", method="GET", delay=0.5, count=1)
        slow = asyncio.create_task(client.permission("acme", "lib", "slow"))
        async with asyncio.timeout(10):
            while client._in_flight["core"] == 0:
                await asyncio.sleep(0.01)
        with pytest.raises(RateLimited, match="in flight"):
            await client.permission("acme", "lib", "second")
        await slow
        assert client.rate_budget.bucket("core").remaining == 0
    refused = [route for route, statuses in sim.counters.snapshot()["routes"].items()
               if "403" in statuses or "429" in statuses]
    assert refused == []


def _gauge(text: str, name: str, resource: str) -> float:
    m = re.search(rf'^{name}{{resource="{resource}"}} (\S+)$', text, re.M)
    assert m, f"{name}{{resource={resource!r}}} not in /metrics"
    return float(m.group(1))


async def test_metrics_show_the_budget_and_an_idle_reread_of_an_unchanged_pr_costs_nothing(db_url, low_limit):
    sim = low_limit.sim
    pr = await sim.open_pr(REPO, title="t", head="feat", author="dev", files={"a.txt": "a\n"})
    config = make_config(db_url, low_limit.url, github={"reserve_fraction": 0.25})
    async with serving(config) as (rt, http):
        assert rt.rate_budget is rt.github.rate_budget
        assert rt.rate_budget.reserve_fraction == 0.25
        token = config.github.token.get_secret_value()

        await read_observation(rt, parse_pr_key(f"{REPO}#{pr.number}"))  # what a sync reads: all 200s
        first = rt.rate_budget.bucket("core").remaining
        assert first < LIMIT and first == _sim_balance(sim, token)
        await read_observation(rt, parse_pr_key(f"{REPO}#{pr.number}"))  # unchanged: all 304s
        assert rt.rate_budget.bucket("core").remaining == first == _sim_balance(sim, token)

        text = (await http.get("/metrics")).text
        assert _gauge(text, "convergebot_github_rate_remaining", "core") == first
        assert _gauge(text, "convergebot_github_rate_limit", "core") == LIMIT
        assert _gauge(text, "convergebot_github_rate_used", "core") == LIMIT - first
        assert _gauge(text, "convergebot_github_rate_reserve", "core") == 10
        assert 3500 < _gauge(text, "convergebot_github_rate_reset_seconds", "core") <= 3600
        assert _gauge(text, "convergebot_github_rate_idle_allowance", "core") == rt.rate_budget.idle_allowance()
        # Defined for the poller, which counts the idle re-reads it puts off.
        assert re.search(r"^convergebot_idle_polls_deferred_total \S+$", text, re.M)


async def test_a_progress_check_out_of_rate_limit_waits_for_the_reset_and_spends_no_attempt(db):
    """The check's head read finds the budget spent: the job is put off to GitHub's reset (a
    Reschedule, which gives its attempt back), not failed and retried every few seconds until
    it runs out of attempts."""
    import json
    from datetime import timedelta

    from bot.config import Config
    from bot.runtime.context import Runtime
    from bot.runtime.workers import Reschedule
    from bot.surfaces.serve import job_handlers
    from storage import prs, rounds
    from storage.models import Job, utcnow

    from ..helpers import enroll

    key = "o/r#1"
    pk = await enroll(db, key)
    assert await prs.fenced_update(db, key, pk, {"status": "converging", "current_round": 1, "head_branch": "feat"})
    async with db.session() as s:
        await rounds.start(s, key, pk, 1, "a" * 40)
        assert await rounds.next_attempt(s, key, pk, 1, {}) == 0
    # Nothing listens there: an exhausted budget refuses before anything is sent.
    async with open_github(api_url="http://127.0.0.1:9", token="t") as gh:
        client = GitHubClient(gh)
        reset = utcnow() + timedelta(minutes=30)
        client._exhausted_until = reset
        rt = Runtime(Config(), db, github=client)
        job = Job(kind="progress_check", key="pc:test", pr_key=key, process_key=pk, round_no=1,
                  payload=json.dumps({"attempt": 0}))
        with pytest.raises(Reschedule) as put_off:
            await job_handlers(rt)["progress_check"](job)
    assert put_off.value.at == reset
