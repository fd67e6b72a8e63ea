"""One GitHub App installed on two organisations, `installation_id` unset: the real bot (serve's
stack) converges and merges a PR in each org against the simulator, and every request for an
org's repository, REST or GraphQL, went with that org's installation's token, the next pages of
a listing (named by repository id) too."""

from __future__ import annotations

import uuid

from simulator import Simulator, SimulatorServer

from ..helpers import app_private_key
from ..serving import WEBHOOK_SECRET, serving
from .harness import FILES, Harness, bot_config, steps

REPOS = ("org-a/app", "org-b/app")


async def test_one_app_on_two_orgs_converges_a_pr_in_each_with_its_own_installation(tmp_path, db_url):
    sim = Simulator(root=tmp_path / "github")
    installation = {repo: sim.add_installation(repo.split("/")[0]).id for repo in REPOS}
    pem = app_private_key(tmp_path)
    async with SimulatorServer(sim) as server:
        for repo in REPOS:
            await sim.create_repo(repo, files=FILES, collaborators={"maint": "write"})
            sim.set_reviewer(repo, steps(1, 0))  # one finding, then a clean review
            # A busy repository: the scan's read of its comments spans two pages, and GitHub's
            # next link names the repository by id (/repositories/{id}/...), not by name.
            chatter = await sim.open_pr(repo, title="Chatter", head="chatter", author="dev",
                                        files={"notes.txt": "n\n"})
            for i in range(101):
                await sim.comment(repo, chatter.number, f"note {i}", user="dev")
        # githubkit caches App tokens process-wide by app id: an id of this test's own.
        config = bot_config(db_url, server.url, github={
            "app_id": str(uuid.uuid4().int % 10**8), "private_key_path": str(pem)})
        async with serving(config) as (rt, http):
            sim.configure_webhooks(f"{http.base_url}/webhook", WEBHOOK_SECRET)
            h = Harness(sim, server.url, rt, http)
            assert rt.github.per_installation
            keys = []
            for repo in REPOS:
                pr = await sim.open_pr(repo, title="Change", head="feat", author="dev",
                                       files={"app/core.py": "def f():\n    return 2\n"})
                await sim.comment(repo, pr.number, "/converge", user="maint")
                keys.append(f"{repo}#{pr.number}")
            for key in keys:
                view = await h.wait_status(key, "merged", timeout=90)
                assert [r.status for r in await h.rounds(key)] == ["addressed", "converged"]
                assert view.pr.outcome == "merged"

    counts = sim.installations
    assert counts.count(outcome="refused") == 0, counts.requests
    for repo in REPOS:
        owner, other = repo.split("/")[0], next(r for r in REPOS if r != repo).split("/")[0]
        mine = installation[repo]
        # Its reads, check runs, thread replies and merge: all with its own installation's token.
        assert counts.count(mine, owner, "ok") > 10, counts.requests
        assert counts.count(mine, other) == 0
        assert [e for e in sim.effects("merge") if e["repo"] == repo]
        assert [e for e in sim.effects("review_reply") if e["repo"] == repo]  # a GraphQL mutation
        # At most one lookup for the whole run: the scan's listing of each installation's
        # repositories teaches the client their installations, and a step that comes before it
        # looks up once; every step, poll and job after that uses what is known.
        lookups = [p for m, p, s in sim.counters.recent if p == f"/repos/{repo}/installation"]
        assert len(lookups) <= 1, lookups
    assert sorted(set(sim.issued_tokens.values())) == sorted(installation.values())
    assert sim.counters.get("GET", "/installation/repositories") >= 2  # the scan read both
    # The second page of each repository's comments was read, with its own installation's token
    # (counted above: no request of one org went with the other's).
    paged = "/repositories/{repository_id}/issues/comments"
    assert sim.counters.get("GET", paged, 200) + sim.counters.get("GET", paged, 304) >= len(REPOS)
    assert sim.counters.get("GET", paged) == sim.counters.get("GET", paged, 200) + sim.counters.get("GET", paged, 304)
