"""Dependencies given at enrollment against the simulator, through each door: `convergebot
submit --depends-on`, POST /api/prs `depends_on` and `/converge start --depends-on`. Each is
stored with the PR, shown with its source, joined with the body's `Depends-on:` line, kept when
the body is edited, and holds the dependent's merge until the dependency has merged."""

from __future__ import annotations

import asyncio
import json
import os
import sys

import pytest
from sqlmodel import select

from storage.models import Dependency

from .harness import REPO, Harness, bot_on_simulator, steps
from .test_dependencies import _cli_status, _merged_numbers, _open


async def _cli_submit(h: Harness, db_url: str, *args: str) -> str:
    """`convergebot submit` as a user runs it beside the bot, on its database and GitHub."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVERGEBOT_")}
    env |= {"CONVERGEBOT_DATABASE_URL": db_url, "CONVERGEBOT_GITHUB_API_URL": h.sim_url,
            "CONVERGEBOT_GITHUB_TOKEN": "test-token"}
    p = await asyncio.create_subprocess_exec(sys.executable, "-m", "bot", "submit", *args, env=env,
                                             stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(p.communicate(), 60)
    assert p.returncode == 0, err.decode()[-2000:]
    return out.decode()


async def _enroll(h: Harness, db_url: str, door: str, key: str, number: int, dependency: str, dep_number: int):
    if door == "cli":
        said = await _cli_submit(h, db_url, key, "--depends-on", dependency)
        assert said.rstrip().endswith(f", depending on {dependency}"), said
    elif door == "api":
        r = await h.http.post("/api/prs", json={"pr": key, "depends_on": [dependency]},
                              headers={"Authorization": "Bearer api-token"})
        assert r.status_code == 201, r.text
    else:
        await h.sim.comment(REPO, number, f"/converge start --depends-on #{dep_number}", user="maint")


@pytest.mark.parametrize("door", ["cli", "api", "command"])
async def test_a_dependency_given_at_enrollment_is_kept_shown_and_merged_first(tmp_path, db_url, door):
    async with bot_on_simulator(tmp_path, db_url) as h:
        h.sim.set_reviewer(REPO, steps(0))  # every PR clean at once
        key_a, a = await _open(h, "base-change", "app/core.py")
        key_c, c = await _open(h, "docs-first", "docs/c.md")
        key_b, b = await _open(h, "on-top", "app/util.py", body=f"Builds on them.\n\nDepends-on: #{c}")
        api_b = f"/api/prs/{key_b.replace('#', '/')}"

        await _enroll(h, db_url, door, key_b, b, key_a, a)

        def waiting(*keys: str):
            async def check():
                v = await h.view(key_b)
                if v is None or v.pr.status != "waiting_deps" or not (v.pr.last_action or "").startswith("waiting for "):
                    return None
                return set(v.pr.last_action.removeprefix("waiting for ").split(", ")) == set(keys)
            return check

        # Converged, B waits for both: the explicit A and the body's C.
        await h.wait_for("B to wait for A and C", waiting(key_a, key_c), timeout=60)
        async with h.rt.db.read_session() as s:
            rows = await s.exec(select(Dependency).where(Dependency.pr_key == key_b))
            stored = {(d.depends_on_key, d.source) for d in rows}
        assert stored == {(key_a, "explicit"), (key_c, "body")}
        shown = (await h.http.get(api_b)).json()
        assert (shown["depends_on"], shown["unmerged_deps"]) == ([key_a, key_c], [key_a, key_c])
        assert shown["dependency_sources"] == {key_a: ["explicit"], key_c: ["body"]}
        one = json.loads(await _cli_status(db_url, key_b, "--json"))
        assert (one["depends_on"], one["dependency_sources"]) == (shown["depends_on"], shown["dependency_sources"])

        # C merged by hand: B still waits, for A alone.
        await h.sim.merge_pr(REPO, c, actor="maint")
        await h.wait_for("B to wait for A alone", waiting(key_a))

        # The body edited, its line gone: A stays, given at enrollment.
        await h.sim.edit_pr(REPO, b, actor="dev", body="Builds on A alone now.")

        async def body_read_again():
            return (await h.http.get(api_b)).json()["dependency_sources"] == {key_a: ["explicit"]}

        await h.wait_for("B's body to be read again", body_read_again)
        assert (await h.view(key_b)).pr.status == "waiting_deps"
        assert _merged_numbers(h) == []

        await h.sim.comment(REPO, a, "/converge", user="maint")
        await h.wait_status(key_a, "merged", timeout=60)
        await h.wait_status(key_b, "merged", timeout=30)
        assert _merged_numbers(h) == [a, b]
        view_a, view_b = await h.view(key_a), await h.view(key_b)
        assert view_a.pr.merged_at < view_b.pr.merged_at
        shown = (await h.http.get(api_b)).json()
        assert (shown["depends_on"], shown["unmerged_deps"], shown["dependency_sources"]) \
            == ([key_a], [], {key_a: ["explicit"]})
