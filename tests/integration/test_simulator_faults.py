"""Injected request faults: server errors, rate limiting, slowness, hangs; and the counters."""

from __future__ import annotations

import json
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


async def test_a_rewrite_changes_the_next_answers_body_and_keeps_its_status(api, sim, pr):
    url = f"repos/{REPO}/pulls/{pr.number}"
    faithful = await api.get(url)
    sim.inject_fault(r"/pulls/\d+$", method="GET", rewrite="html", count=1)
    page = await api.get(url, headers={"If-None-Match": faithful.headers["etag"]})
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert page.text.startswith("<!DOCTYPE html>") and page.headers["etag"] != faithful.headers["etag"]
    sim.inject_fault(r"/pulls/\d+$", method="GET", rewrite="wrong_types", count=1)
    retyped = (await api.get(url)).json()
    assert retyped["number"] == str(pr.number) and retyped["head"]["sha"] == 40
    sim.inject_fault(r"/pulls/\d+$", method="GET", rewrite="missing", count=1)
    emptied = (await api.get(url)).json()
    assert emptied["number"] == pr.number and emptied["head"] == {} and emptied["user"] == {}
    sim.inject_fault(r"/pulls/\d+$", method="GET", status=502, rewrite="truncated", count=1)
    cut, whole = await api.get(url), json.dumps({"message": "Bad Gateway"}).encode()
    assert cut.status_code == 502 and cut.content == whole[: len(whole) // 2]
    assert (await api.get(url)).json() == faithful.json()  # count=1: the next answer is faithful again


async def test_a_rewrite_must_be_one_the_simulator_knows(api, sim, pr):
    bad = await api.post("_sim/faults", json={"path": "/pulls", "rewrite": "garbled"})
    assert bad.status_code == 422 and "rewrite" in bad.json()["message"]
    made = await api.post("_sim/faults", json={"path": "/contents/", "rewrite": "bad_base64", "count": 1})
    assert made.status_code == 200 and made.json()["rewrite"] == "bad_base64"


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
