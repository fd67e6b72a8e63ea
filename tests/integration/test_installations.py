"""One GitHub App on several organisations, against the simulator over HTTP: each repository's
requests (REST and GraphQL) go with its own installation's token, the installation is looked up
once per repository, an org without the App is a one-line error, the scan reads every
installation's repositories, and each installation has its own rate limit."""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
from datetime import timedelta

import pytest

from bot.config import Config
from bot.engine.progress import _head
from bot.github import installations as installations_module
from bot.github.client import GitHubClient, open_github
from bot.github.errors import RateLimited, Unavailable
from bot.github.installations import NotInstalled, learn_from_payload
from bot.intake.scan import repositories
from bot.runtime.context import Runtime
from bot.surfaces.cli import NoSuchPr, _check_pr_exists
from bot.surfaces.doctor import run_doctor
from storage.keys import parse_pr_key
from storage.models import PullRequest

from ..helpers import app_private_key
from ..serving import WEBHOOK_SECRET, make_config, serving
from ..simulator_fixtures import start_simulator

LOOKUP = "/repos/{owner}/{repo}/installation"
MINT = "/app/installations/{installation_id}/access_tokens"
# githubkit caches App JWTs and installation tokens by app id: ids of each test's own keep one
# test's tokens from reaching another test's simulator.
_APP_IDS = itertools.count(88_001)


@pytest.fixture
def pem(tmp_path) -> str:
    return app_private_key(tmp_path).read_text()


async def _two_orgs(sim) -> tuple[int, int, int, int]:
    """org-a/one and org-b/two, one PR each, the App installed on each org: (a, b, pr a, pr b)."""
    a = sim.add_installation("org-a").id
    b = sim.add_installation("org-b").id
    for repo in ("org-a/one", "org-b/two"):
        await sim.create_repo(repo)
    pa = await sim.open_pr("org-a/one", title="a", head="feat", author="dev", files={"a.txt": "a\n"})
    pb = await sim.open_pr("org-b/two", title="b", head="feat", author="dev", files={"b.txt": "b\n"})
    return a, b, pa.number, pb.number


def _app(url: str, pem: str):
    return open_github(api_url=url, app_id=str(next(_APP_IDS)), private_key=pem)


async def test_each_orgs_requests_go_with_its_own_installations_token(simulator, sim, pem):
    a, b, na, nb = await _two_orgs(sim)
    async with _app(simulator.url, pem) as gh:
        client = GitHubClient(gh)
        assert client.per_installation
        for owner, repo, number in (("org-a", "one", na), ("org-b", "two", nb)):
            pr = await client.pull(owner, repo, number)
            head = pr["head"]["sha"]
            threads, runs, _ = await client.review_state(owner, repo, number, head)  # GraphQL
            assert threads == [] and runs == []
            assert await client.merge_queue(owner, repo, number)  # GraphQL
            await client.create_check_run(owner, repo, name="convergebot", head_sha=head, status="completed",
                                          conclusion="success")
            await client.merge(owner, repo, number, head)
    assert sim.state.prs[("org-a/one", na)].merged and sim.state.prs[("org-b/two", nb)].merged
    counts = sim.installations
    assert counts.count(outcome="refused") == 0, counts.requests
    # REST paths and GraphQL repository lookups of each org came with that org's token only.
    assert counts.count(a, "org-a") == 5 and counts.count(b, "org-b") == 5  # 3 REST, 2 GraphQL each
    assert counts.count(a, "org-b") == 0 and counts.count(b, "org-a") == 0
    assert sorted(sim.issued_tokens.values()) == sorted([a, b])  # one token minted per installation
    assert sim.counters.get("POST", "/graphql", 200) >= 4


async def test_the_installation_lookup_is_made_once_per_repository(simulator, sim, pem):
    _, _, na, nb = await _two_orgs(sim)
    async with _app(simulator.url, pem) as gh:
        client = GitHubClient(gh)
        for _ in range(5):
            await client.pull("org-a", "one", na)
            await client.reviews("org-a", "one", na)
            await client.pull("org-b", "two", nb)
    assert sim.counters.get("GET", LOOKUP) == 2
    assert client.installation_lookups == 2
    assert sim.counters.get("POST", MINT) == 2


async def test_a_missing_resource_does_not_cost_a_lookup_per_read(simulator, sim, pem, monkeypatch):
    """A 404 for something that is not there (a repository without a config file) is no sign
    the installation changed: it is asked about again only after an hour, not a minute."""
    monkeypatch.setattr(installations_module, "REVERIFY_SECONDS", 0.0)
    _, _, na, _ = await _two_orgs(sim)
    async with _app(simulator.url, pem) as gh:
        client = GitHubClient(gh)
        for _ in range(3):
            assert await client.file_text("org-a", "one", ".github/convergebot.toml") is None  # 404
            await client.pull("org-a", "one", na)
    assert sim.counters.get("GET", LOOKUP) == 1


async def test_a_token_of_one_installation_is_refused_on_another_orgs_repository(simulator, sim, api):
    a, _, _, nb = await _two_orgs(sim)
    sim.repo("org-b/two").private = True  # any installation's token reads a public repository
    jwt = {"Authorization": "Bearer a.b.c"}
    token = (await api.post(f"/app/installations/{a}/access_tokens", headers=jwt)).json()["token"]
    mine = {"Authorization": f"token {token}"}
    assert (await api.get("/repos/org-a/one", headers=mine)).status_code == 200
    assert (await api.get(f"/repos/org-b/two/pulls/{nb}", headers=mine)).status_code == 404
    query = 'query { repository(owner: "org-b", name: "two") { name } }'
    answer = (await api.post("/graphql", json={"query": query}, headers=mine)).json()
    assert answer["errors"][0]["type"] == "NOT_FOUND"
    assert sim.installations.count(a, "org-b", "refused") == 2
    # A public repository of another org: read (as GitHub lets any token), never written.
    await sim.create_repo("org-b/open")
    assert (await api.get("/repos/org-b/open/git/ref/heads/main", headers=mine)).status_code == 200
    wrote = await api.post("/repos/org-b/open/check-runs", json={"name": "x", "head_sha": "0" * 40}, headers=mine)
    assert wrote.status_code == 404
    assert sim.installations.count(a, "org-b", "public") == 1
    assert sim.installations.count(a, "org-b", "refused") == 3
    # The App endpoints: its installations, a repository's, none for an account without it.
    assert [i["account"]["login"] for i in (await api.get("/app/installations", headers=jwt)).json()] == \
        ["org-a", "org-b"]
    assert (await api.get("/repos/org-a/one/installation", headers=jwt)).json()["id"] == a
    await sim.create_repo("org-c/three")
    assert (await api.get("/repos/org-c/three/installation", headers=jwt)).status_code == 404
    assert (await api.get("/repos/org-a/one/installation", headers=mine)).status_code == 401  # JWT only
    assert (await api.post("/app/installations/999/access_tokens", headers=jwt)).status_code == 404


async def test_a_repository_of_an_org_without_the_app_is_a_one_line_error(simulator, sim, pem, tmp_path):
    await _two_orgs(sim)
    await sim.create_repo("org-c/three")
    pr = await sim.open_pr("org-c/three", title="c", head="feat", author="dev", files={"c.txt": "c\n"})
    async with _app(simulator.url, pem) as gh:
        client = GitHubClient(gh)
        for _ in range(3):
            with pytest.raises(NotInstalled, match="^the GitHub App is not installed on org-c/three$"):
                await client.pull("org-c", "three", pr.number)
        assert sim.counters.get("GET", LOOKUP, 404) == 1  # asked once, not on every read
        assert (await client.pull("org-a", "one", 1))["number"] == 1  # the others still work
    config = Config.model_validate({"github": {"api_url": simulator.url, "app_id": str(next(_APP_IDS)),
                                               "private_key_path": str(app_private_key(tmp_path))}})
    with pytest.raises(NoSuchPr) as refused:
        await _check_pr_exists(config, parse_pr_key(f"org-c/three#{pr.number}"))
    message = str(refused.value)
    assert "not installed on org-c/three" in message and "\n" not in message


async def test_the_scan_reads_every_installations_repositories(simulator, sim, pem, db):
    await _two_orgs(sim)
    await sim.create_repo("org-b/more")
    await sim.create_repo("org-c/not-ours")  # no installation on org-c: not read
    config = Config.model_validate({"database": {"url": db.url}, "github": {"api_url": simulator.url}})
    async with _app(simulator.url, pem) as gh:
        client = GitHubClient(gh)
        rt = Runtime(config, db, client)
        assert sorted(await repositories(rt, [])) == ["org-a/one", "org-b/more", "org-b/two"]
        assert sim.counters.get("GET", "/app/installations") == 1
        assert sim.counters.get("GET", "/installation/repositories") == 2
        await client.open_pulls("org-b", "more")  # its installation came with the listing
        assert sim.counters.get("GET", LOOKUP) == 0
    assert sim.installations.count(outcome="refused") == 0


async def test_a_webhook_payload_tells_a_repositorys_installation(simulator, sim, pem):
    a, _, na, _ = await _two_orgs(sim)
    async with _app(simulator.url, pem) as gh:
        client = GitHubClient(gh)
        learn_from_payload(client, {"installation": {"id": "x"}, "repository": {"full_name": "org-a/one"}})
        assert client.installations.get("org-a/one") is None  # malformed: skipped
        learn_from_payload(client, {"installation": {"id": a}, "repository": {"full_name": "org-a/one"}})
        await client.pull("org-a", "one", na)
    assert sim.counters.get("GET", LOOKUP) == 0
    assert sim.installations.count(a, "org-a", "ok") == 1


async def test_a_signed_webhook_teaches_the_serving_bot_a_repositorys_installation(simulator, sim, pem, tmp_path,
                                                                                   db_url):
    a, _, na, _ = await _two_orgs(sim)
    config = make_config(db_url, simulator.url, scan={"enabled": False}, github={
        "app_id": str(next(_APP_IDS)), "private_key_path": str(app_private_key(tmp_path))})
    async with serving(config) as (rt, http):
        body = json.dumps({"action": "edited", "installation": {"id": a},
                           "repository": {"full_name": "org-a/one"}}).encode()
        signature = "sha256=" + hmac.new(WEBHOOK_SECRET.encode(), body, hashlib.sha256).hexdigest()
        answer = await http.post("/webhook", content=body, headers={
            "X-GitHub-Event": "repository", "X-GitHub-Delivery": "d-1", "X-Hub-Signature-256": signature,
            "Content-Type": "application/json"})
        assert answer.status_code == 202
        assert rt.github.installations.get("org-a/one") == a
        await rt.github.pull("org-a", "one", na)
    assert sim.counters.get("GET", LOOKUP) == 0
    assert sim.installations.count(a, "org-a", "ok") >= 1


async def test_each_installation_has_its_own_rate_limit(tmp_path, pem):
    server = await start_simulator(tmp_path / "gh", rate_limit=3)
    try:
        sim = server.sim
        a, b, na, nb = await _two_orgs(sim)
        async with _app(server.url, pem) as gh:
            client = GitHubClient(gh)
            for user in ("u1", "u2", "u3"):  # distinct URLs: no 304 saves the budget
                await client.permission("org-a", "one", user)
            assert client.rate_budget.of(a).bucket("core").remaining == 0
            sent = sim.counters.total()
            with pytest.raises(RateLimited, match="rate limit spent"):
                await client.pull("org-a", "one", na)  # held back: org-a's budget is spent
            assert sim.counters.total() == sent
            assert (await client.pull("org-b", "two", nb))["number"] == nb  # org-b has its own
            assert client.rate_budget.of(b).bucket("core").remaining == 2
            # Pacing reads the tightest installation: org-a's.
            assert client.rate_budget.bucket("core").remaining == 0
            assert not client.rate_budget.may_spend("idle")
    finally:
        await server.stop()


async def test_the_push_token_is_the_prs_installations(simulator, sim, pem):
    a, b, _, _ = await _two_orgs(sim)
    async with _app(simulator.url, pem) as gh:
        client = GitHubClient(gh)
        ta = await client.clone_token("org-a", "one")
        tb = await client.clone_token("org-b", "two")
        assert await client.clone_token("org-a", "one") == ta  # minted once, reused
        with pytest.raises(NotInstalled):
            await client.clone_token("org-c", "three")
    assert sim.issued_tokens[ta] == a and sim.issued_tokens[tb] == b


async def test_a_reinstalled_app_is_found_again_after_a_401(tmp_path, pem, monkeypatch):
    """An installation removed and the App installed again (a new id): the old token answers
    401, and the next request looks the installation up again and uses the new one."""
    monkeypatch.setattr(installations_module, "REVERIFY_SECONDS", 0.0)
    server = await start_simulator(tmp_path / "gh", tokens={"unused"})  # only minted tokens pass
    try:
        sim = server.sim
        a, _, na, _ = await _two_orgs(sim)
        async with _app(server.url, pem) as gh:
            client = GitHubClient(gh)
            await client.pull("org-a", "one", na)
            del sim.installations.by_id[a]
            for token in [t for t, i in sim.issued_tokens.items() if i == a]:
                del sim.issued_tokens[token]
            again = sim.add_installation("org-a", 5555).id
            with pytest.raises(Exception, match="401"):
                await client.pull("org-a", "one", na)
            assert (await client.pull("org-a", "one", na))["number"] == na
        assert sim.counters.get("GET", LOOKUP) == 2
        assert sim.installations.count(again, "org-a", "ok") == 1
    finally:
        await server.stop()


async def test_a_removed_installation_whose_token_expired_is_looked_up_again(tmp_path, pem, monkeypatch):
    """The App uninstalled and installed again after its old token expired: minting a token for
    the old id answers 404, and the next request looks the installation up again."""
    monkeypatch.setattr(installations_module, "REVERIFY_SECONDS", 0.0)
    server = await start_simulator(tmp_path / "gh", tokens={"unused"})
    try:
        sim = server.sim
        a, _, na, _ = await _two_orgs(sim)
        async with _app(server.url, pem) as gh:
            client = GitHubClient(gh)
            await client.pull("org-a", "one", na)
            del sim.installations.by_id[a]
            again = sim.add_installation("org-a", 6666).id
            storage = await gh.config.cache_strategy.get_async_cache_storage()
            for key in list(storage._cache):  # an hour on: githubkit's cached token has expired
                storage.set(key, "", timedelta(seconds=-1))
            with pytest.raises(Unavailable):
                await client.pull("org-a", "one", na)  # the old installation's token: 404
            assert (await client.pull("org-a", "one", na))["number"] == na
        assert sim.counters.get("GET", LOOKUP) == 2
        assert sim.counters.get("POST", MINT, 404) == 1
        assert sim.installations.count(again, "org-a", "ok") == 1
    finally:
        await server.stop()


async def test_doctor_lists_the_installations(simulator, sim, tmp_path, db):
    a, b, _, _ = await _two_orgs(sim)
    config = Config.model_validate({
        "database": {"url": db.url},
        "github": {"api_url": simulator.url, "app_id": str(next(_APP_IDS)),
                   "private_key_path": str(app_private_key(tmp_path))},
    })
    lines: list[str] = []
    await run_doctor(config, lines.append)
    assert "[ok  ] GitHub credentials: GitHub App, every installation" in lines
    assert f"[ok  ] installation {a} on org-a: rate limit 5000/5000" in lines
    assert f"[ok  ] installation {b} on org-b: rate limit 5000/5000" in lines


async def test_a_listing_that_spans_pages_keeps_its_repositorys_installation(simulator, sim, pem):
    """GitHub's next links name the repository by id (`/repositories/8514/...`), not by owner
    and name: every page of a listing goes with the installation of the repository the first
    page named, in each org."""
    a, b, na, nb = await _two_orgs(sim)
    for i in range(101):  # one page is 100
        await sim.comment("org-a/one", na, f"a {i}", user="dev")
        await sim.comment("org-b/two", nb, f"b {i}", user="dev")
    await sim.open_pr("org-b/two", title="b2", head="feat2", author="dev", files={"c.txt": "c\n"})
    async with _app(simulator.url, pem) as gh:
        client = GitHubClient(gh)
        assert [c["body"] for c in await client.issue_comments("org-a", "one", na)] == [f"a {i}" for i in range(101)]
        assert len(await client.issue_comments("org-b", "two", nb)) == 101
        # comment_once reads every page before it posts: its marker is on none of them.
        await client.comment_once("org-b", "two", nb, "m-1", "once")
        await client.comment_once("org-b", "two", nb, "m-1", "once")
        pulls, _, complete = await client.pulls_by_update("org-b", "two", None, per_page=1)
        assert complete and len(pulls) == 2
    paged = "/repositories/{repository_id}/issues/{number}/comments"
    assert sim.counters.get("GET", paged) == 4  # the second page: once in org-a, three times in org-b
    assert sim.counters.get("GET", "/repositories/{repository_id}/pulls", 200) == 1
    assert len([c for c in sim.state.issue_comments.values() if "m-1" in (c.body or "")]) == 1
    counts = sim.installations
    assert counts.count(outcome="refused") == 0 and counts.count(outcome="public") == 0, counts.requests
    assert counts.count(a, "org-a", "ok") == 2 and counts.count(b, "org-a") == 0
    assert counts.count(b, "org-b", "ok") == 9 and counts.count(a, "org-b") == 0  # 8 GETs, 1 POST
    assert sim.counters.get("GET", LOOKUP) == 2


async def test_a_forks_branch_is_read_with_the_base_repositorys_installation(simulator, sim, pem, db,
                                                                              monkeypatch):
    """The progress check's head of a PR from a fork in an account without the App: the fork's
    branch read with the base's installation (no lookup of the fork's account); a fork it cannot
    read (private) falls back to the PR object's head instead of failing the check."""
    monkeypatch.setattr(installations_module, "NOT_FOUND_REVERIFY_SECONDS", 0.0)  # any 404 would count
    a, _, _, _ = await _two_orgs(sim)
    await sim.fork_repo("org-a/one", "dev")
    pr = await sim.open_pr("org-a/one", title="f", head="fix", author="dev", head_repo="dev/one",
                           files={"f.txt": "f\n"})
    row = PullRequest(pr_key=f"org-a/one#{pr.number}", repo="org-a/one", number=pr.number,
                      head_repo="dev/one", head_branch="fix")
    config = Config.model_validate({"database": {"url": db.url}, "github": {"api_url": simulator.url}})
    async with _app(simulator.url, pem) as gh:
        client = GitHubClient(gh)
        rt = Runtime(config, db, client)
        pushed = await sim.push("dev/one", "fix", {"f.txt": "g\n"}, author="dev")
        assert await _head(rt, row) == pushed
        assert sim.installations.count(a, "dev", "public") == 1
        sim.repo("dev/one").private = True  # now only an installation on `dev` could read it
        assert await _head(rt, row) == (await client.pull("org-a", "one", pr.number))["head"]["sha"]
        assert sim.installations.count(a, "dev", "refused") == 1
        assert client.installations.get("org-a/one") == a  # the fork's 404 did not unsettle it
    assert [p for _, p, _ in sim.counters.recent if p == "/repos/dev/one/installation"] == []
    assert sim.counters.get("GET", LOOKUP) == 1  # org-a/one's, once


async def test_the_apps_own_calls_build_no_tls_context_each(simulator, sim, pem, monkeypatch):
    """Every call as the App (the delivery log read page after page, a redelivery, a lookup)
    gets a client of its own; they share the one TLS context built with the process's client,
    instead of loading the CA bundle for each (~25 ms of CPU a call)."""
    import ssl

    built = []
    real = ssl.create_default_context
    monkeypatch.setattr(ssl, "create_default_context", lambda *a, **kw: built.append(1) or real(*a, **kw))
    _, _, na, _ = await _two_orgs(sim)
    async with _app(simulator.url, pem) as gh:
        client = GitHubClient(gh)
        before = len(built)
        for _ in range(3):
            await client.hook_deliveries()
        await client.pull("org-a", "one", na)  # an installation lookup as the App, then the read
    assert sim.counters.get("GET", "/app/hook/deliveries") == 3
    assert sim.counters.get("GET", LOOKUP) == 1
    assert len(built) == before
