"""A PR from a fork, with one GitHub App on two organisations (`installation_id` unset) and the
fork in an account without the App: the fork's branch is read with the base repository's
installation (a public fork is readable with any installation's token), so the round closes when
the fork's branch moves, and the fork's account is never looked up."""

from __future__ import annotations

import uuid
from contextlib import asynccontextmanager

from bot.fixers import ScriptedFixer
from simulator import Simulator, SimulatorServer
from storage import jobs

from ..helpers import app_private_key
from ..serving import WEBHOOK_SECRET, serving
from .harness import FILES, Harness, Recording, bot_config, quiesce, steps

BASE, OTHER = "org-a/app", "org-b/app"
FORK = "dev/app"  # the account `dev` has no installation of the App
FORK_LOOKUP = f"/repos/{FORK}/installation"


@asynccontextmanager
async def _bot_on_two_orgs(tmp_path, db_url, fixer, fixer_config):
    """The real bot (serve's stack), a GitHub App installed on org-a and org-b, against the
    simulator: (harness, installation id of each org's repository)."""
    sim = Simulator(root=tmp_path / "github")
    installation = {repo: sim.add_installation(repo.split("/")[0]).id for repo in (BASE, OTHER)}
    async with SimulatorServer(sim) as server:
        for repo in (BASE, OTHER):
            await sim.create_repo(repo, files=FILES, collaborators={"maint": "write"})
        sim.set_reviewer(BASE, steps(1, 0))  # one finding, then a clean review
        config = bot_config(db_url, server.url, fixer_config=fixer_config, github={
            # githubkit caches App tokens process-wide by app id: an id of this test's own.
            "app_id": str(uuid.uuid4().int % 10**8), "private_key_path": str(app_private_key(tmp_path))})
        async with serving(config, fixer=fixer) as (rt, http):
            sim.configure_webhooks(f"{http.base_url}/webhook", WEBHOOK_SECRET)
            assert rt.github.per_installation
            yield Harness(sim, server.url, rt, http), installation


async def _open_from_fork(h: Harness, *, maintainer_can_modify: bool) -> tuple[str, int]:
    # The base has a branch of the fork's branch's name: the PR's head must never be read there.
    await h.sim.push(BASE, "feat", {"app/util.py": "X = 'the base branch of that name'\n"})
    await h.sim.fork_repo(BASE, "dev")
    pr = await h.sim.open_pr(BASE, title="From a fork", head="feat", author="dev", head_repo=FORK,
                             files={"app/core.py": "def f():\n    return 2\n"},
                             maintainer_can_modify=maintainer_can_modify)
    await h.sim.comment(BASE, pr.number, "/converge", user="maint")
    return f"{BASE}#{pr.number}", pr.number


def _assert_the_fork_was_read_with_the_bases_installation(sim, installation) -> None:
    counts, a = sim.installations, installation[BASE]
    assert sim.counters.get("GET", "/repos/{owner}/{repo}/installation") <= 2  # the orgs' own, at most
    assert [p for _, p, _ in sim.counters.recent if p == FORK_LOOKUP] == [], "the fork's account was looked up"
    assert counts.count(outcome="refused") == 0, counts.requests
    # The fork's branch was read, with org-a's token (a public repository: any token reads it).
    assert counts.count(a, "dev", "public") >= 1, counts.requests
    assert counts.count(installation[OTHER], "dev") == 0 and counts.count(installation[OTHER], "org-a") == 0


async def test_the_fixer_pushes_to_a_fork_without_the_app_and_the_round_advances(tmp_path, db_url):
    fixer = Recording(ScriptedFixer(["push"]))
    async with _bot_on_two_orgs(tmp_path, db_url, fixer, {"allow_forks": True}) as (h, installation):
        key, _ = await _open_from_fork(h, maintainer_can_modify=True)
        view = await h.wait_status(key, "merged", timeout=90)
        # The progress check read the fork's branch after the fixer's push: the round advanced
        # (no `no_advance`, no retries of an unreadable head).
        assert await h.escalations(key) == []
        checks = [j for j in await jobs.list_jobs(h.rt.db, key) if j.kind == "progress_check"]
        # (a round's deadline check may still wait, queued; none failed to read the head)
        assert [j for j in checks if j.status == "done"] and [j.last_error for j in checks] == [None] * len(checks)
        first, second = await h.rounds(key)
        assert (first.status, second.status) == ("addressed", "converged")
        (req,) = fixer.requests
        assert req.clone_url == h.sim.repo(FORK).git_dir.as_uri()
        (pushed,) = [u for u in h.sim.ref_updates if u["repo"] == FORK and u["via"] == "git"]
        assert pushed["new"] == first.exit_head == second.entry_head
        assert view.pr.head_repo == FORK and view.pr.converged_head == first.exit_head
        assert h.rt.github.installations.get(FORK) is None and not h.rt.github.installations.missing(FORK)
    _assert_the_fork_was_read_with_the_bases_installation(h.sim, installation)


async def test_the_author_pushes_to_a_fork_without_the_app_and_the_round_advances(tmp_path, db_url):
    """Forks off: the maintainers are asked, the author pushes to the fork, a maintainer answers,
    and the next round reviews the fork's new head."""
    fixer = Recording(ScriptedFixer(["push"]))
    async with _bot_on_two_orgs(tmp_path, db_url, fixer, None) as (h, installation):
        key, number = await _open_from_fork(h, maintainer_can_modify=True)
        await h.wait_status(key, "escalated")
        (esc,) = await h.escalations(key)
        assert esc.kind == "fork"
        await quiesce(h)
        await h.sim.push(FORK, "feat", {"app/core.py": "def f():\n    return 3\n"}, author="dev")
        pushed = h.sim.ref_updates[-1]["new"]
        await h.sim.comment(BASE, number, "/converge answer pushed a fix", user="maint")
        view = await h.wait_status(key, "merged", timeout=90)
        first, second = await h.rounds(key)
        assert (first.status, second.status) == ("addressed", "converged")
        assert second.entry_head == pushed == view.pr.converged_head
        assert fixer.requests == []
    _assert_the_fork_was_read_with_the_bases_installation(h.sim, installation)
