"""Injected request faults: server errors, rate limiting, slowness, hangs; and the counters."""

from __future__ import annotations

import time

import httpx
import pytest

REPO = "acme/widgets"
PULL = "/repos/{owner}/{repo}/pulls/{number}"


@pytest.fixture
async def pr(sim):
    await sim.create_repo(REPO)
    return await sim.open_pr(REPO, title="T", head="h", files={"a.txt": "a"})


async def test_500_for_count_requests_then_normal(api, sim, pr):
    sim.inject_fault(r"/pulls/\d+$", method="GET", status=500, count=2)
    statuses = [(await api.get(f"repos/{REPO}/pulls/{pr.number}")).status_code for _ in range(3)]
    assert statuses == [500, 500, 200]
    assert (await api.get(f"repos/{REPO}")).status_code == 200  # other paths are untouched
    assert sim.counters.get("GET", PULL, 500) == 2
    assert sim.counters.get("GET", PULL, 200) == 1


async def test_fault_matches_method(api, sim, pr):
    sim.inject_fault(r"/issues/\d+/comments$", method="POST", status=502)
    assert (await api.get(f"repos/{REPO}/issues/{pr.number}/comments")).status_code == 200
    posted = await api.post(f"repos/{REPO}/issues/{pr.number}/comments", json={"body": "x"})
    assert posted.status_code == 502
    assert sim.effects() == []  # the write never happened


@pytest.mark.parametrize("status", [429, 403])
async def test_rate_limited_answer_carries_retry_after(api, sim, pr, status):
    sim.inject_fault(r"/pulls", status=status, retry_after=7, count=1)
    resp = await api.get(f"repos/{REPO}/pulls/{pr.number}")
    assert resp.status_code == status
    assert resp.headers["retry-after"] == "7"
    assert resp.headers["x-ratelimit-remaining"] == "0"
    assert 0 < int(resp.headers["x-ratelimit-reset"]) - time.time() <= 8
    assert (await api.get(f"repos/{REPO}/pulls/{pr.number}")).status_code == 200


async def test_delay_answers_late_but_normally(api, sim, pr):
    sim.inject_fault(r"^/repos/acme/widgets$", delay=0.4, count=1)
    started = time.monotonic()
    slow = await api.get(f"repos/{REPO}")
    took = time.monotonic() - started
    assert slow.status_code == 200 and took >= 0.4
    started = time.monotonic()
    await api.get(f"repos/{REPO}")
    assert time.monotonic() - started < 0.4


async def test_drop_holds_the_request_until_the_client_gives_up(simulator, sim, pr):
    sim.inject_fault(r"/pulls/\d+$", drop=True, count=1)
    async with httpx.AsyncClient(base_url=simulator.url, timeout=0.5) as short:
        with pytest.raises(httpx.ReadTimeout):
            await short.get(f"repos/{REPO}/pulls/{pr.number}")
        assert (await short.get(f"repos/{REPO}/pulls/{pr.number}")).status_code == 200


async def test_graphql_can_fail_too(api, sim, pr):
    sim.inject_fault(r"^/graphql$", method="POST", status=502, count=1)
    query = {"query": "{ rateLimit { remaining } }"}
    assert (await api.post("graphql", json=query)).status_code == 502
    ok = await api.post("graphql", json=query)
    assert ok.json()["data"]["rateLimit"]["remaining"] == 4999
    assert ok.headers["x-ratelimit-resource"] == "graphql"


async def test_faults_never_touch_the_control_api(api, sim, pr):
    sim.inject_fault(r".*", status=500)
    assert (await api.get(f"repos/{REPO}")).status_code == 500
    assert (await api.get("_sim/counters")).status_code == 200
    assert (await api.delete("_sim/faults")).json() == []
    assert (await api.get(f"repos/{REPO}")).status_code == 200


async def test_faults_over_the_control_api(api, sim, pr):
    created = await api.post("_sim/faults", json={"path": "/pulls", "status": 503, "count": 1})
    assert created.status_code == 200 and created.json()["status"] == 503
    assert (await api.get(f"repos/{REPO}/pulls")).status_code == 503
    bad = await api.post("_sim/faults", json={"path": "/pulls", "status": 418})
    assert bad.status_code == 422 and "status" in bad.json()["message"]


async def test_counters_group_by_route_template_and_reset(api, sim, pr):
    await api.get(f"repos/{REPO}/pulls/{pr.number}")
    await api.get(f"repos/{REPO}/pulls/999")
    await api.get("repos/acme/widgets/not-a-thing")
    snapshot = (await api.get("_sim/counters")).json()
    assert snapshot["routes"][f"GET {PULL}"] == {"200": 1, "404": 1}
    assert snapshot["routes"]["GET {unmatched}"] == {"404": 1}
    assert snapshot["total"] == 3
    assert (await api.delete("_sim/counters")).json()["total"] == 0
    assert sim.counters.total() == 0
