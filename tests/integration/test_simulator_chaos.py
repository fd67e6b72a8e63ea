"""Seeded request chaos over real HTTP: faults by rate, lost acknowledgements, what is exempt."""

from __future__ import annotations

import httpx
import pytest
from githubkit import GitHub
from githubkit.exception import PrimaryRateLimitExceeded, SecondaryRateLimitExceeded

from bot.github.client import GitHubClient, open_github
from bot.github.errors import RateLimited
from tests.simulator_fixtures import WEBHOOK_SECRET, git

REPO = "acme/widgets"
MARKER = "<!-- convergebot:escalation:1 -->"


@pytest.fixture
async def pr(sim):
    await sim.create_repo(REPO)
    return await sim.open_pr(REPO, title="T", head="h", files={"a.txt": "a\n"}, author="alice")


async def _statuses(api, n: int, path: str = f"repos/{REPO}") -> list[int]:
    return [(await api.get(path)).status_code for _ in range(n)]


async def test_rates_of_zero_never_fault(api, sim, pr):
    sim.chaos(1)
    assert await _statuses(api, 20) == [200] * 20
    assert sim.chaos_counts == {}
    assert sim.request_chaos.seen == 20


async def test_error_rate_one_fails_every_request_before_it_is_handled(api, sim, pr):
    sim.chaos(2, error_rate=1.0)
    statuses = await _statuses(api, 30)
    assert set(statuses) <= {500, 502, 503} and len(set(statuses)) > 1
    posted = await api.post(f"repos/{REPO}/issues/{pr.number}/comments", json={"body": "x"})
    assert posted.status_code in (500, 502, 503)
    assert sim.effects() == []  # a faulted write never happened
    assert sim.chaos_counts == {"error": 31}
    sim.chaos_off()
    assert (await api.get(f"repos/{REPO}")).status_code == 200
    assert sim.chaos_counts == {"error": 31}  # still readable after chaos_off


async def test_same_seed_gives_the_same_fault_sequence(api, sim, pr):
    rates = {"error_rate": 0.2, "rate_limit_rate": 0.2, "secondary_rate": 0.2}
    sim.chaos(42, **rates)
    first = await _statuses(api, 40)
    first_counts = sim.chaos_counts
    sim.chaos(42, **rates)
    assert await _statuses(api, 40) == first
    assert sim.chaos_counts == first_counts
    sim.chaos(43, **rates)
    assert await _statuses(api, 40) != first
    assert {200, 403, 429} <= set(first)


async def test_rate_limit_answers_carry_retry_after_but_not_an_exhausted_budget(api, sim, pr):
    sim.chaos(3, rate_limit_rate=1.0, retry_after=4)
    limited = await api.get(f"repos/{REPO}")
    assert limited.status_code == 429
    assert limited.headers["retry-after"] == "4"
    assert int(limited.headers["x-ratelimit-remaining"]) > 0
    assert "secondary rate" not in limited.json()["message"]
    sim.chaos(3, secondary_rate=1.0, retry_after=4)
    secondary = await api.get(f"repos/{REPO}")
    assert secondary.status_code == 403
    assert secondary.headers["retry-after"] == "4"
    assert int(secondary.headers["x-ratelimit-remaining"]) > 0
    assert "secondary rate limit" in secondary.json()["message"]
    assert sim.chaos_counts == {"secondary": 1}


@pytest.mark.parametrize("kind", ["rate_limit_rate", "secondary_rate"])
async def test_githubkit_sees_a_secondary_limit_not_an_exhausted_token(simulator, sim, pr, kind):
    sim.chaos(4, **{kind: 1.0}, retry_after=2)
    async with GitHub("t", base_url=simulator.url, auto_retry=False) as gh:
        with pytest.raises(SecondaryRateLimitExceeded) as caught:
            await gh.arequest("GET", f"/repos/{REPO}")
    assert not isinstance(caught.value, PrimaryRateLimitExceeded)
    assert caught.value.retry_after.total_seconds() == 2


async def test_bot_client_keeps_calling_after_a_random_rate_limit(simulator, sim, pr):
    # A primary-exhausted answer would make the client fail every call until the reset.
    async with open_github(api_url=simulator.url, token="t", timeout=2, read_timeout=2) as gh:
        client = GitHubClient(gh, call_timeout=4)
        sim.chaos(5, rate_limit_rate=1.0, retry_after=1)
        with pytest.raises(RateLimited) as caught:
            await client.pull("acme", "widgets", pr.number)
        assert caught.value.secondary
        sim.chaos_off()
        assert (await client.pull("acme", "widgets", pr.number))["number"] == pr.number


async def test_lost_ack_comment_is_stored_and_announced_but_answered_502(api, sim, pr,
                                                                        webhook_receiver):
    sim.configure_webhooks(webhook_receiver.url, WEBHOOK_SECRET)
    sim.chaos(6, lost_ack_rate=1.0)
    posted = await api.post(f"repos/{REPO}/issues/{pr.number}/comments",
                            json={"body": f"hello\n\n{MARKER}"})
    assert posted.status_code == 502
    listed = await api.get(f"repos/{REPO}/issues/{pr.number}/comments")
    assert listed.status_code == 200
    assert [c["body"] for c in listed.json()] == [f"hello\n\n{MARKER}"]
    assert [e["kind"] for e in sim.effects()] == ["issue_comment"]
    [delivered] = await webhook_receiver.wait_for("issue_comment", "created")
    assert delivered.payload["comment"]["body"].startswith("hello")
    assert sim.chaos_counts == {"lost_ack": 1}
    assert sim.counters.get("POST", "/repos/{owner}/{repo}/issues/{number}/comments", 502) == 1


async def test_reads_are_never_lost_acked_but_graphql_mutations_are(api, sim, pr):
    await sim.submit_review(REPO, pr.number, user="carol",
                            threads=[{"path": "a.txt", "line": 1, "body": "why?"}])
    thread = sim.state.threads[pr.thread_ids[0]]
    sim.chaos(7, lost_ack_rate=1.0)
    assert await _statuses(api, 10, f"repos/{REPO}/pulls/{pr.number}") == [200] * 10
    query = {"query": "query { rateLimit { remaining } }"}
    assert (await api.post("graphql", json=query)).status_code == 200
    mutation = {"query": "mutation($id: ID!) { resolveReviewThread(input: {threadId: $id}) "
                         "{ thread { isResolved } } }", "variables": {"id": thread.node_id}}
    assert (await api.post("graphql", json=mutation)).status_code == 502
    assert thread.is_resolved
    assert sim.chaos_counts == {"lost_ack": 1}


async def test_control_api_hook_and_rate_limit_probe_are_never_faulted(api, sim, pr, tmp_path):
    sim.chaos(8, error_rate=0.5, secondary_rate=0.5, lost_ack_rate=1.0)
    assert (await api.get("rate_limit")).status_code == 200
    assert (await api.get("_sim/counters")).status_code == 200
    created = await api.post(f"_sim/repos/{REPO}/pulls/{pr.number}/comments",
                             json={"user": "bob", "body": "via control"})
    assert created.status_code == 201
    # A real push reports itself through POST /_sim/hooks/post-receive.
    work = tmp_path / "work"
    await git("clone", "--quiet", "--branch", "h", sim.repo(REPO).git_dir.as_uri(), str(work))
    (work / "a.txt").write_text("b\n")
    await git("commit", "--quiet", "-am", "b", cwd=work)
    await git("push", "--quiet", "origin", "h", cwd=work)
    assert [u["via"] for u in sim.ref_updates][-1] == "git"
    assert sim.request_chaos.seen == 0


async def test_excluded_paths_are_left_alone(api, sim, pr):
    sim.chaos(9, error_rate=1.0, exclude=[r"/issues/\d+/comments$"])
    assert await _statuses(api, 5, f"repos/{REPO}/issues/{pr.number}/comments") == [200] * 5
    assert set(await _statuses(api, 5)) <= {500, 502, 503}


async def test_injected_faults_take_precedence(api, sim, pr):
    sim.chaos(10, error_rate=1.0)
    sim.inject_fault(r"^/repos/acme/widgets$", status=404, count=2)
    statuses = await _statuses(api, 3)
    assert statuses[:2] == [404, 404] and statuses[2] in (500, 502, 503)
    assert sim.request_chaos.seen == 1


async def test_slow_answers_wait_before_handling(simulator, sim, pr):
    sim.chaos(11, slow_rate=1.0, slow_seconds=1.0)
    async with httpx.AsyncClient(base_url=simulator.url, timeout=0.1) as short:
        with pytest.raises(httpx.ReadTimeout):
            await short.get(f"repos/{REPO}")
    assert sim.chaos_counts == {"slow": 1}


async def test_chaos_over_the_control_api(api, sim, pr):
    started = await api.put("_sim/chaos", json={"seed": 12, "error_rate": 1.0,
                                                "exclude": ["/pulls"]})
    assert started.status_code == 200
    assert started.json()["settings"]["error_rate"] == 1.0
    assert started.json()["settings"]["exclude"] == ["/pulls"]
    assert (await api.get(f"repos/{REPO}")).status_code in (500, 502, 503)
    assert (await api.get(f"repos/{REPO}/pulls")).status_code == 200
    seen = (await api.get("_sim/chaos")).json()
    assert seen["enabled"] and seen["counts"] == {"error": 1} and seen["requests"] == 1
    stopped = (await api.delete("_sim/chaos")).json()
    assert not stopped["enabled"] and stopped["counts"] == {"error": 1}
    assert (await api.get(f"repos/{REPO}")).status_code == 200
    too_much = await api.put("_sim/chaos", json={"seed": 1, "error_rate": 0.6,
                                                 "secondary_rate": 0.6})
    assert too_much.status_code == 422
    assert (await api.put("_sim/chaos", json={"seed": 1, "error_rate": 2})).status_code == 422
    assert "seed" in (await api.put("_sim/chaos", json={})).json()["message"]
    assert (await api.put("_sim/chaos", json={"seed": 1, "nope": 1})).status_code == 422
