"""A PR enrolled by a maintainer's `/converge` converges in 3 rounds with a real command fixer."""

from __future__ import annotations

import json
import sys
import textwrap

from sqlmodel import select

from storage.models import WebhookDelivery
from tests.serving import CHECK_RUN_SETTLE_SECONDS

from .harness import REPO, bot_on_simulator, steps

FIXER_SCRIPT = textwrap.dedent('''
    import json, os, pathlib, subprocess
    doc = json.load(open(os.environ["CONVERGEBOT_FINDINGS_FILE"]))
    for f in doc["findings"]:
        p = pathlib.Path(f["path"])
        p.write_text(p.read_text() + "# addressed: " + f["body"] + "\\n")
    subprocess.run(["git", "commit", "-qam", "address round %s" % doc["round"]], check=True)
    print("working...")
    print(json.dumps({"status": "addressed", "summary": "edited %d file(s)" % len(doc["findings"]),
                      "threads": [{"id": f["thread_id"], "action": "fixed"} for f in doc["findings"]]}))
''')


async def test_converges_in_three_rounds_with_a_real_command_fixer(tmp_path, db_url):
    script = tmp_path / "agent.py"
    script.write_text(FIXER_SCRIPT)
    fixer = {"kind": "command", "command": [sys.executable, str(script)]}
    async with bot_on_simulator(tmp_path, db_url, fixer_config=fixer) as h:
        # Each head lives past a check-run update's settle window, so each gets its run.
        h.sim.set_reviewer(REPO, steps(3, 1, 0, delay=CHECK_RUN_SETTLE_SECONDS))
        pr = await h.sim.open_pr(REPO, title="Add feature", head="feat", author="dev",
                                 files={"app/core.py": "def f():\n    return 2\n"})
        number = pr.number
        key = f"{REPO}#{number}"
        await h.sim.comment(REPO, number, "/converge", user="maint")

        view = await h.wait_status(key, "merged", timeout=60)
        assert view.pr.outcome == "merged"
        rounds = await h.rounds(key)
        assert [(r.round_no, r.status) for r in rounds] == [(1, "addressed"), (2, "addressed"), (3, "converged")]
        assert [len(json.loads(r.findings)) for r in rounds] == [3, 1, 0]
        # Each round starts where the previous one ended; the fixer's pushes moved the head.
        assert rounds[0].exit_head == rounds[1].entry_head != rounds[0].entry_head
        assert rounds[1].exit_head == rounds[2].entry_head == rounds[2].exit_head != rounds[1].entry_head
        assert view.pr.converged_head == rounds[2].exit_head

        # The maintainer's command was acknowledged; all 4 threads were replied to and resolved.
        reactions = [e["content"] for e in h.sim.effects("reaction")]
        # Two effects on two workers: either may land first.
        assert sorted(reactions) == ["+1", "eyes"]
        assert len(h.sim.effects("thread_resolved")) == 4
        assert len(h.sim.effects("review_reply")) == 4
        merge = h.sim.effects("merge")
        assert len(merge) == 1 and merge[0]["number"] == number

        # The fixer's two pushes came back as `synchronize` webhooks: known echoes of our own
        # push, they queued no sync (the progress check reads the branch itself).
        async def synchronized():
            async with h.rt.db.session() as s:
                found = (await s.exec(select(WebhookDelivery).where(
                    WebhookDelivery.event == "pull_request", WebhookDelivery.action == "synchronize"))).all()
            return found if len(found) == 2 else None

        assert [d.outcome for d in await h.wait_for("both pushes' webhooks", synchronized)] == ["ignored"] * 2

        # The `convergebot` check run on the converged head says so (an outbox effect, so it
        # follows the merge), and each round's head had one.
        async def ours():
            found = [r for r in await h.rt.github.check_runs("acme", "app", view.pr.converged_head)
                     if r["name"] == "convergebot"]
            return found if found and found[0]["status"] == "completed" else None

        (run,) = await h.wait_for("the check run to complete", ours)
        assert (run["status"], run["conclusion"]) == ("completed", "success")
        assert "round 3/8" in run["output"]["title"] and "merged" in run["output"]["summary"]
        for r in rounds[:2]:
            (earlier,) = [c for c in await h.rt.github.check_runs("acme", "app", r.entry_head)
                          if c["name"] == "convergebot"]
            assert f"round {r.round_no}/8" in earlier["output"]["title"]


async def test_the_author_is_asked_and_their_push_moves_the_round_on(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, fixer_config={"kind": "author", "timeout_seconds": 600}) as h:
        h.sim.set_reviewer(REPO, steps(1, 0))
        pr = await h.sim.open_pr(REPO, title="t", head="feat", author="dev", files={"app/core.py": "x = 1\n"})
        key = f"{REPO}#{pr.number}"
        await h.sim.comment(REPO, pr.number, "/converge", user="maint")

        async def asked():
            return [c for c in h.bot_comments(pr.number) if "@dev" in c["body"]]

        (ask,) = await h.wait_for("the request to the author", asked)
        assert "finding 0 of review 0" in ask["body"]
        await h.sim.push(REPO, "feat", {"app/core.py": "x = 2\n"}, author="dev")
        view = await h.wait_status(key, "merged", timeout=30)  # not the 10-minute deadline
        assert [r.status for r in await h.rounds(key)] == ["addressed", "converged"]
        assert view.pr.outcome == "merged"


async def test_the_label_and_an_auto_enroll_author_enroll_prs(tmp_path, db_url):
    from bot.fixers import ScriptedFixer

    conv = {"auto_enroll_authors": ["agent[bot]"]}
    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["push"]), convergence=conv) as h:
        h.sim.set_reviewer(REPO, steps(0))
        labeled = await h.sim.open_pr(REPO, title="a", head="a", author="dev", files={"a.txt": "a\n"})
        await h.sim.add_labels(REPO, labeled.number, ["converge"], actor="maint")
        by_agent = await h.sim.open_pr(REPO, title="b", head="b", author="agent[bot]", files={"b.txt": "b\n"})
        other = await h.sim.open_pr(REPO, title="c", head="c", author="dev", files={"c.txt": "c\n"})
        for pr in (labeled, by_agent):
            view = await h.wait_status(f"{REPO}#{pr.number}", "merged", timeout=30)
            assert view.pr.submitted_by in ("label", "auto")
        assert await h.view(f"{REPO}#{other.number}") is None


async def test_no_merge_stops_at_converged(tmp_path, db_url):
    from bot.fixers import ScriptedFixer

    async with bot_on_simulator(tmp_path, db_url, fixer=ScriptedFixer(["push"])) as h:
        h.sim.set_reviewer(REPO, steps(1, 0))
        pr = await h.sim.open_pr(REPO, title="t", head="feat", author="dev", files={"a.txt": "a\n"})
        key = f"{REPO}#{pr.number}"
        await h.sim.comment(REPO, pr.number, "/converge start --no-merge --rounds 3", user="maint")
        view = await h.wait_status(key, "converged", timeout=30)
        assert (view.pr.max_rounds, view.pr.converge_only, view.run_state) == (3, True, "completed")
        assert view.pr.converged_head == await h.rt.github.branch_head("acme", "app", "feat")
        assert h.sim.effects("merge") == []
