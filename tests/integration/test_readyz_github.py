"""/readyz tells an operator when the bot cannot work with GitHub: credentials GitHub rejects,
and GitHub not answering for longer than `[github] unreachable_after_seconds`. The balancer's
probe (`/readyz`) lists them and stays 200, so webhooks keep coming in; the alert's probe
(`/readyz?include=github`) is 503 with them."""

from __future__ import annotations

from tests.simulator_fixtures import start_simulator

from ..helpers import until
from ..serving import make_config, serving
from .test_webhooks import signed

REPO = "acme/app"
AUTH = {"Authorization": "Bearer api-token"}


async def _problems(http) -> tuple[int, list[str]]:
    """The alert's probe: GitHub's trouble counts."""
    r = await http.get("/readyz", params={"include": "github"})
    return r.status_code, r.json()["problems"]


async def _balancer_probe_lists(http, text: str) -> bool:
    """The balancer's probe stays 200 (webhooks still come in) and names GitHub's trouble."""
    r = await http.get("/readyz")
    return r.status_code == 200 and r.json()["problems"] == [] and any(text in p for p in r.json()["github"])


async def test_a_token_github_rejects_fails_readyz_and_an_accepted_one_clears_it(tmp_path, db_url):
    gh = await start_simulator(tmp_path / "github", tokens={"good-token"})
    try:
        await gh.sim.create_repo(REPO)
        await gh.sim.open_pr(REPO, title="Change", head="feat", files={"a.txt": "a\n"})
        config = make_config(db_url, api_url=gh.url, github={"token": "wrong-token"})
        async with serving(config) as (rt, http):
            assert await _problems(http) == (200, [])
            # The enrolled PR's first step reads it from GitHub: 401.
            assert (await http.post("/api/prs", json={"pr": f"{REPO}#1"}, headers=AUTH)).status_code == 201

            async def rejected():
                status, problems = await _problems(http)
                return status == 503 and "GitHub rejected the credentials (401)" in problems

            await until("readyz to report the rejected token", rejected, 20)
            assert await _balancer_probe_lists(http, "GitHub rejected the credentials (401)")
            # The operator fixes the token: the next answered request clears it.
            gh.sim.tokens.add("wrong-token")
            await until("readyz ok again", lambda: _ok(http), 20)
    finally:
        await gh.stop()


async def _ok(http) -> bool:
    return await _problems(http) == (200, [])


async def test_github_unanswered_past_the_configured_time_fails_readyz(tmp_path, db_url):
    gh = await start_simulator(tmp_path / "github")
    try:
        await gh.sim.create_repo(REPO)
        await gh.sim.open_pr(REPO, title="Change", head="feat", files={"a.txt": "a\n"})
        config = make_config(db_url, api_url=gh.url, github={"unreachable_after_seconds": 1})
        async with serving(config) as (rt, http):
            gh.sim.inject_fault(".*", status=503)  # every request: GitHub is down
            assert (await http.post("/api/prs", json={"pr": f"{REPO}#1"}, headers=AUTH)).status_code == 201

            async def unreachable():
                status, problems = await _problems(http)
                return status == 503 and any(p.startswith("GitHub unreachable for ") for p in problems)

            await until("readyz to report GitHub unreachable", unreachable, 20)
            assert await _balancer_probe_lists(http, "GitHub unreachable for ")
            # A webhook still lands while GitHub is down: recorded, to be worked on when it is back.

            body = b'{"zen": "down"}'
            landed = await http.post("/webhook", content=body, headers=signed(body, "ping", "during-outage"))
            assert landed.status_code == 202, landed.text
            assert rt.github.reach.unanswered_since is not None
            gh.sim.clear_faults()  # back: the step's retry is answered
            await until("readyz ok again", lambda: _ok(http), 20)
    finally:
        await gh.stop()


NO_CREDENTIALS = "no GitHub credentials (github.token, or github.app_id and github.private_key_path)"
NO_FIXER = "the fixer's command is not found (`convergebot doctor` names it)"


async def test_no_github_credentials_at_all_fails_readyz_and_a_token_passes_it(sqlite_db_url):
    async with serving(make_config(sqlite_db_url, github={"token": ""})) as (_rt, http):
        status, problems = await _problems(http)
        assert status == 503 and NO_CREDENTIALS in problems
    async with serving(make_config(sqlite_db_url)) as (_rt, http):
        assert NO_CREDENTIALS not in (await _problems(http))[1]


async def test_a_fixer_command_not_installed_fails_readyz_until_it_is(tmp_path, sqlite_db_url):
    agent = tmp_path / "bin" / "agent"
    config = make_config(sqlite_db_url, fixer={"kind": "command", "command": [str(agent)], "sandbox": "off"})
    async with serving(config) as (_rt, http):
        r = await http.get("/readyz")
        assert r.status_code == 503 and NO_FIXER in r.json()["problems"]
        assert str(tmp_path) not in r.text, "/readyz is public: no path of the machine"
        agent.parent.mkdir()
        agent.write_text("#!/bin/sh\n")
        agent.chmod(0o755)
        assert NO_FIXER not in (await _problems(http))[1]
