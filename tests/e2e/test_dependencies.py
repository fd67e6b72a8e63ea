"""`Depends-on:` against the simulator: merge order, the merged dependency that moves its
dependents at once, a cycle that asks once, and where people and programs see dependencies."""

from __future__ import annotations

import asyncio
import json
import os
import sys

from .harness import REPO, bot_on_simulator, steps


async def _open(h, head: str, path: str, body: str = "") -> tuple[str, int]:
    pr = await h.sim.open_pr(REPO, title=f"Change {head}", head=head, author="dev", body=body,
                             files={path: f"# {head}\n"})
    return f"{REPO}#{pr.number}", pr.number


async def _cli_status(db_url: str, *args: str) -> str:
    """`convergebot status` as a user runs it beside the bot, on the same database."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVERGEBOT_")}
    env["CONVERGEBOT_DATABASE_URL"] = db_url
    p = await asyncio.create_subprocess_exec(sys.executable, "-m", "bot", "status", *args, env=env,
                                             stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(p.communicate(), 60)
    assert p.returncode == 0, err.decode()[-2000:]
    return out.decode()


def _merged_numbers(h) -> list[int]:
    return [e["number"] for e in h.sim.effects("merge")]


async def test_a_dependent_that_converged_first_merges_right_after_its_dependency(tmp_path, db_url):
    # No poll after the first: only the dependency's merge can move the waiting dependent.
    async with bot_on_simulator(tmp_path, db_url, poller={"interval_seconds": 3600}) as h:
        key_a, a = await _open(h, "base-change", "app/core.py")
        key_b, b = await _open(h, "on-top", "app/util.py", body=f"Builds on it.\n\nDepends-on: #{a}")
        h.sim.set_reviewer(REPO, steps(1, 0), number=a)  # A needs a round of fixes
        h.sim.set_reviewer(REPO, steps(0), number=b)  # B is clean at once

        await h.sim.comment(REPO, b, "/converge", user="maint")

        async def waiting_for_a():
            v = await h.view(key_b)
            return v and v.pr.status == "waiting_deps" and v.pr.last_action == f"waiting for {key_a}"

        await h.wait_for("B to wait for A", waiting_for_a)
        assert _merged_numbers(h) == []
        # The API shows what B waits for, while it waits.
        shown = (await h.http.get(f"/api/prs/{key_b.replace('#', '/')}")).json()
        assert (shown["status"], shown["depends_on"], shown["unmerged_deps"]) == ("waiting_deps", [key_a], [key_a])
        listed = {r["pr_key"]: r for r in (await h.http.get("/api/prs")).json()}
        assert listed[key_b]["depends_on"] == [key_a]
        page = (await h.http.get("/")).text
        assert f"{key_a} <span class=\"waiting\">not merged</span>" in page
        await h.sim.comment(REPO, b, "/converge status", user="maint")

        async def status_reply():
            return [c for c in h.bot_comments(b) if "convergebot status" in c.get("body", "")]

        (reply,) = await h.wait_for("the status reply", status_reply)
        assert f"Depends on: {key_a} (not merged)." in reply["body"], reply["body"]

        await h.sim.comment(REPO, a, "/converge", user="maint")
        await h.wait_status(key_a, "merged", timeout=60)
        await h.wait_status(key_b, "merged", timeout=30)

        assert _merged_numbers(h) == [a, b]
        assert [r.status for r in await h.rounds(key_a)] == ["addressed", "converged"]
        assert [r.status for r in await h.rounds(key_b)] == ["converged"]
        view_a, view_b = await h.view(key_a), await h.view(key_b)
        assert view_a.pr.merged_at < view_b.pr.merged_at

        # Every surface shows the dependency, now merged.
        shown = (await h.http.get(f"/api/prs/{key_b.replace('#', '/')}")).json()
        assert (shown["depends_on"], shown["unmerged_deps"]) == ([key_a], [])
        assert f"{key_a} <span class=\"merged\">merged</span>" in (await h.http.get("/")).text
        rows = {r["pr_key"]: r for r in json.loads(await _cli_status(db_url, "--json"))}
        assert (rows[key_b]["depends_on"], rows[key_b]["unmerged_deps"]) == ([key_a], [])
        assert (rows[key_a]["depends_on"], rows[key_a]["unmerged_deps"]) == ([], [])
        one = json.loads(await _cli_status(db_url, key_b, "--json"))
        assert one["depends_on"] == [key_a] and one["runs"]
        table = await _cli_status(db_url)
        assert "DEPENDS ON" in table.splitlines()[0]
        (line_b,) = [line for line in table.splitlines() if line.startswith(key_b + " ")]
        assert line_b.endswith(key_a)


async def test_a_dependency_cycle_escalates_once_per_pr_and_merges_nothing(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, poller={"interval_seconds": 0.3}) as h:
        h.sim.set_reviewer(REPO, steps(0))
        key_a, a = await _open(h, "left", "app/core.py")
        key_b, b = await _open(h, "right", "app/util.py", body=f"Depends-on: #{a}")
        await h.sim.edit_pr(REPO, a, actor="dev", body=f"Depends-on: {REPO}#{b}")
        for n in (a, b):
            await h.sim.comment(REPO, n, "/converge", user="maint")
        await h.wait_status(key_a, "escalated")
        await h.wait_status(key_b, "escalated")

        # More steps of both: webhooks (a body edit that keeps the cycle) and poll ticks.
        for n, other in ((a, b), (b, a)):
            await h.sim.edit_pr(REPO, n, actor="dev", body=f"Still needs it.\n\nDepends-on: #{other}")
        for key in (key_a, key_b):
            seen: set = set()

            async def synced_again(key=key, seen=seen):
                seen.add((await h.view(key)).pr.synced_at)
                return len(seen) >= 4

            await h.wait_for(f"{key} to be re-read three more times", synced_again)
        await h.sim.settle()

        for key, n, cycle in ((key_a, a, f"{key_a} → {key_b} → {key_a}"),
                              (key_b, b, f"{key_b} → {key_a} → {key_b}")):
            (esc,) = await h.escalations(key)
            assert (esc.kind, esc.status) == ("merge", "open")
            assert cycle in esc.question
            view = await h.view(key)
            assert view.derived_status == "escalated"

            async def asked(n=n):
                return [c for c in h.bot_comments(n) if "convergebot escalation" in c["body"]]

            (comment,) = await h.wait_for(f"the escalation comment on #{n}", asked)
            assert cycle in comment["body"]
        assert _merged_numbers(h) == []
        listed = {r["pr_key"]: r for r in (await h.http.get("/api/prs")).json()}
        assert (listed[key_a]["depends_on"], listed[key_b]["depends_on"]) == ([key_b], [key_a])
