"""The GitHub client wrapper against the simulator over real HTTP."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from bot.github.client import GitHubClient, open_github
from bot.github.endpoints.reviews import COPILOT_REVIEWER
from bot.github.errors import RateLimited, Unavailable
from storage.keys import parse_pr_key

from ..simulator_fixtures import sim, simulator  # noqa: F401

REPO = "acme/lib"


@pytest.fixture
async def client(simulator):  # noqa: F811
    await simulator.sim.create_repo(REPO, collaborators={"maint": "write", "viewer": "read"})
    async with open_github(api_url=simulator.url, token="t", timeout=2, read_timeout=2) as gh:
        yield GitHubClient(gh, max_concurrency=4, call_timeout=4)


async def _pr(sim) -> int:  # noqa: F811
    pr = await sim.open_pr(REPO, title="t", head="feat", author="dev", files={"a.txt": "a\n"})
    return pr.number


async def test_reads_follow_every_page(client, sim):  # noqa: F811
    n = await _pr(sim)
    for i in range(150):
        await sim.comment(REPO, n, f"comment {i}", user="dev")
    comments = await client.issue_comments("acme", "lib", n)
    assert [c["body"] for c in comments] == [f"comment {i}" for i in range(150)]
    assert await client.branch_head("acme", "lib", "feat") == (await client.pull("acme", "lib", n))["head"]["sha"]


async def test_comment_once_posts_one_comment_per_marker(client, sim):  # noqa: F811
    n = await _pr(sim)
    first = await client.comment_once("acme", "lib", n, "convergebot:x:1", "hello")
    again = await client.comment_once("acme", "lib", n, "convergebot:x:1", "hello")
    assert first["id"] == again["id"]
    assert len(sim.effects("issue_comment")) == 1


async def test_permission_levels(client, sim):  # noqa: F811
    assert await client.can_write("acme", "lib", "maint")
    assert not await client.can_write("acme", "lib", "viewer")
    assert not await client.can_write("acme", "lib", "stranger")


async def test_copilot_review_falls_back_to_requested_reviewers_where_the_endpoint_is_missing(client, sim):  # noqa: F811
    n = await _pr(sim)
    sim.inject_fault(r"/copilot-code-review$", status=404)  # as on GHES
    requested = await client.request_review("acme", "lib", n, [COPILOT_REVIEWER, "maint"])
    assert set(requested) == {COPILOT_REVIEWER, "maint"}


async def test_a_first_request_asks_without_looking_and_a_repeat_is_harmless(client, sim):  # noqa: F811
    n = await _pr(sim)
    looks = dict(method="GET", route="/repos/{owner}/{repo}/pulls/{number}/requested_reviewers")
    sim.counters.reset()
    assert await client.request_review("acme", "lib", n, [COPILOT_REVIEWER, "maint"], look=False) == [
        COPILOT_REVIEWER, "maint"]
    assert sim.counters.get(**looks) == 0
    # Asked again without looking (a nudge or a lost answer would look; this shows why that is
    # only a saving): Copilot's pending review answers 409, and the person stays asked once.
    await client.request_review("acme", "lib", n, [COPILOT_REVIEWER, "maint"], look=False)
    _, pr = sim.pr("acme/lib", n)
    assert pr.requested_reviewers.count("maint") == 1 and len(pr.requested_reviewers) == 2
    # Looking finds both pending and asks nobody.
    assert await client.request_review("acme", "lib", n, [COPILOT_REVIEWER, "maint"]) == []
    assert sim.counters.get(**looks) == 1


async def test_server_errors_and_rate_limits_become_job_layer_errors(client, sim):  # noqa: F811
    n = await _pr(sim)
    sim.inject_fault(rf"/pulls/{n}$", status=502, count=1)
    with pytest.raises(Unavailable):
        await client.pull("acme", "lib", n)
    sim.inject_fault(rf"/pulls/{n}$", status=429, retry_after=30, count=1)
    with pytest.raises(RateLimited) as limited:
        await client.pull("acme", "lib", n)
    assert limited.value.secondary
    assert datetime.now(UTC) + timedelta(seconds=25) < limited.value.retry_at
    # Nothing sleeps inside the call: the next one goes through at once.
    started = time.monotonic()
    assert (await client.pull("acme", "lib", n))["number"] == n
    assert time.monotonic() - started < 1


async def test_a_hanging_github_times_out(client, sim):  # noqa: F811
    n = await _pr(sim)
    sim.inject_fault(rf"/pulls/{n}$", drop=True, count=1)
    started = time.monotonic()
    with pytest.raises(Unavailable):
        await client.pull("acme", "lib", n)
    assert time.monotonic() - started < 5


async def test_github_app_installation_tokens_are_minted_once_and_reused(simulator, sim):  # noqa: F811
    await sim.create_repo(REPO)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    # githubkit caches installation tokens process-wide by (app, installation): ids of our own
    # keep this test's token from being reused by another test's simulator.
    async with open_github(api_url=simulator.url, app_id="9001", private_key=pem, installation_id=9002) as gh:
        client = GitHubClient(gh)
        for _ in range(3):
            assert (await client.repo("acme", "lib"))["full_name"] == REPO
    minted = sim.counters.get(method="POST", route="/app/installations/{installation_id}/access_tokens")
    assert minted == 1, sim.counters.snapshot()


async def test_an_exhausted_primary_limit_fails_fast_until_the_reset(tmp_path):
    from ..simulator_fixtures import start_simulator

    server = await start_simulator(tmp_path / "gh", rate_limit=3)
    try:
        await server.sim.create_repo(REPO)
        async with open_github(api_url=server.url, token="t") as gh:
            client = GitHubClient(gh)
            for user in ("a", "b", "c"):  # distinct URLs: no 304 saves the budget here
                await client.permission("acme", "lib", user)
            with pytest.raises(RateLimited) as first:
                await client.permission("acme", "lib", "d")
            assert not first.value.secondary
            assert first.value.retry_at > datetime.now(UTC) + timedelta(minutes=50)  # the hour's reset
            sent = server.sim.counters.total()
            # No call can succeed before the reset: the next ones never reach GitHub.
            with pytest.raises(RateLimited):
                await client.pull("acme", "lib", 1)
            assert server.sim.counters.total() == sent
    finally:
        await server.stop()


async def test_a_github_app_gets_an_installation_token_for_git_minted_once(simulator, sim):  # noqa: F811
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    async with open_github(api_url=simulator.url, app_id="9101", private_key=pem, installation_id=9102) as gh:
        client = GitHubClient(gh)
        first = await client.clone_token()
        assert first in sim.issued_tokens
        assert await client.clone_token() == first
    minted = sim.counters.get(method="POST", route="/app/installations/{installation_id}/access_tokens")
    assert minted == 1
    async with open_github(api_url=simulator.url, token="plain") as gh:
        assert await GitHubClient(gh).clone_token() == "plain"


async def test_two_replies_to_one_thread_at_once_post_one(client, sim):  # noqa: F811
    import asyncio
    import contextlib
    from types import SimpleNamespace

    from bot.effects.replies import Reply, reply_and_resolve

    n = await _pr(sim)
    await sim.submit_review(REPO, n, user=COPILOT_REVIEWER, threads=[{"path": "a.txt", "line": 1, "body": "x?"}])
    (thread,) = await client.review_threads("acme", "lib", n)
    rt = SimpleNamespace(github=client)
    # Each read waits (a bounded while) for the other to have read too: without the PR's lock
    # both read before either writes, which is the race; with it the second read comes after
    # the first write, and the first read's wait runs out.
    real, reads, both = client.review_threads, [], asyncio.Event()

    async def read_together(*args, **kw):
        found = await real(*args, **kw)
        reads.append(1)
        if len(reads) >= 2:
            both.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(both.wait(), 2)
        return found

    client.review_threads = read_together
    # A retried reply of the last round and this round's reply for the same thread, at once.
    await asyncio.gather(*(reply_and_resolve(rt, parse_pr_key(f"{REPO}#{n}"), [Reply(thread["id"], f"Fixed ({i}).", False)])
                           for i in range(2)))
    replies = [e for e in sim.effects("review_reply") if e["actor"] != COPILOT_REVIEWER]
    assert len(replies) == 1, replies


async def test_a_thread_s_first_comment_id_is_read_from_its_full_database_id(client, sim):  # noqa: F811
    from bot.engine.read import thread_of

    n = await _pr(sim)
    await sim.submit_review(REPO, n, user=COPILOT_REVIEWER, threads=[{"path": "a.txt", "line": 1, "body": "x?"}])
    (raw,) = await client.review_threads("acme", "lib", n)
    (comment,) = raw["comments"]["nodes"]
    rest_id = sim.state.thread_by_node(raw["id"]).comment_ids[0]
    assert comment["fullDatabaseId"] == str(rest_id) and "databaseId" not in comment
    assert thread_of(raw).comment_id == rest_id


async def test_a_round_s_replies_are_one_read_and_one_write_and_a_retry_writes_only_what_is_missing(client, sim):  # noqa: F811
    from types import SimpleNamespace

    from bot.effects.replies import Reply, reply_and_resolve
    from bot.engine.outbox import reply_marker
    from bot.github.endpoints.reviews import ThreadWrite

    n = await _pr(sim)
    await sim.submit_review(REPO, n, user=COPILOT_REVIEWER,
                            threads=[{"path": "a.txt", "line": 1, "body": f"x{i}?"} for i in range(3)])
    ids = [t["id"] for t in await client.review_threads("acme", "lib", n)]
    # An earlier attempt's reply on the first thread landed (its answer was lost, the resolve
    # never ran), and someone resolved the second thread meanwhile.
    await client.write_threads([ThreadWrite(ids[0], f"Fixed.\n\n{reply_marker(ids[0])}", False)])
    await sim.resolve_thread(ids[1], user="maint")
    sim.counters.reset()

    rt = SimpleNamespace(github=client)
    await reply_and_resolve(rt, parse_pr_key(f"{REPO}#{n}"), [Reply(i, "Fixed.", True) for i in ids])

    graphql = sim.counters.snapshot()["routes"]["POST /graphql"]
    assert sum(graphql.values()) == 2  # one read of the threads, one write for all of them
    threads = {t["id"]: t for t in await client.review_threads("acme", "lib", n)}
    ours = {i: [c for c in threads[i]["comments"]["nodes"] if reply_marker(i) in c["body"]] for i in ids}
    assert [len(ours[i]) for i in ids] == [1, 0, 1]  # nothing posted twice, nothing on the resolved one
    assert all(threads[i]["isResolved"] for i in ids)


async def test_a_fresh_review_s_threads_and_checks_are_one_graphql_read(client, sim):  # noqa: F811
    from bot.engine.read import checks_of

    n = await _pr(sim)
    head = (await client.pull("acme", "lib", n))["head"]["sha"]
    await sim.submit_review(REPO, n, user=COPILOT_REVIEWER,
                            threads=[{"path": "a.txt", "line": 1, "body": f"x{i}?"} for i in range(105)])
    await sim.create_check_run(REPO, head_sha=head, name="lint", status="completed", conclusion="success")
    await sim.create_check_run(REPO, head_sha=head, name="tests", status="in_progress")
    await sim.create_check_run(REPO, head_sha=head, name="build", status="completed", conclusion="timed_out")
    await sim.create_check_run(REPO, head_sha=head, name="convergebot", app="convergebot", status="in_progress")
    await sim.set_status(REPO, head, "success", context="ci/deploy")
    await sim.set_status(REPO, head, "pending", context="ci/docs")
    sim.counters.reset()

    threads, runs, status = await client.review_state("acme", "lib", n, head)

    routes = sim.counters.snapshot()["routes"]
    # One query; the threads past its first page of 100 cost one more, nothing else is read.
    assert sum(routes["POST /graphql"].values()) == 2 and set(routes) == {"POST /graphql"}
    assert len(threads) == 105 and len({t["id"] for t in threads}) == 105
    assert threads == await client.review_threads("acme", "lib", n)
    for required in ([], ["lint", "ci/deploy"]):
        rest = checks_of(await client.check_runs("acme", "lib", head), await client.combined_status("acme", "lib", head),
                         required)
        assert checks_of(runs, status, required) == rest
    assert checks_of(runs, status, []).failing == ("build",)
    assert checks_of(runs, status, []).pending == ("ci/docs", "tests")


async def test_an_unchanged_resource_read_after_it_changed_costs_a_304(client, sim):  # noqa: F811
    # The cache keeps only the newest answer per URL: with the old one kept too, a 304 carrying
    # a weak ETag matched neither and the read was sent again, a rate-limited 200 for nothing.
    n = await _pr(sim)
    answers = []
    for change in (False, True, False, False, True, False):
        if change:
            await sim.comment(REPO, n, "news", user="dev")  # moves the PR's updated_at
            await sim.submit_review(REPO, n, user="maint", body="ok")
        sim.counters.reset()
        await client.pull("acme", "lib", n)
        answers.append(next(iter(sim.counters.snapshot()["routes"]["GET /repos/{owner}/{repo}/pulls/{number}"])))
    assert answers == ["200", "200", "304", "304", "200", "304"], answers


async def test_a_head_graphql_cannot_resolve_is_not_read_as_green(client, sim):  # noqa: F811
    from bot.github.errors import GitHubError

    n = await _pr(sim)
    with pytest.raises(GitHubError):
        await client.review_state("acme", "lib", n, "0123456789" * 4)
