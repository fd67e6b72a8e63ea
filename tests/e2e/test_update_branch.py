"""A converged PR whose base moved on, where branch protection requires branches to be up to
date (GitHub's `behind`): the bot updates the branch from its base with the head it read as
the precondition, reviews the updated head like any moved head, and merges it
(docs/architecture.md, "Merge stage")."""

from __future__ import annotations

import base64

from storage.keys import parse_pr_key

from .harness import REPO, bot_on_simulator, quiesce, steps

NOT_THE_UPDATE = r"^(?!/repos/[^/]+/[^/]+/pulls/\d+/update-branch$)"


async def _file_on_main(h, path: str) -> str:
    body = await h.http_github(f"/repos/{REPO}/contents/{path}?ref=main")
    return base64.b64decode(body["content"]).decode()


async def _behind_pr(h) -> tuple:
    """A PR opened, then main moved on with a change of another file, then the PR enrolled."""
    pr = await h.sim.open_pr(REPO, title="Change", head="feat", author="dev",
                             files={"app/core.py": "def f():\n    return 2\n"})
    await h.sim.push(REPO, "main", {"docs/notes.md": "main moved on\n"}, author="dev")
    await h.sim.comment(REPO, pr.number, "/converge", user="maint")
    return parse_pr_key(f"{REPO}#{pr.number}"), pr.number, pr.last_head


async def test_a_pr_behind_its_base_is_updated_on_the_head_it_read_then_reviewed_and_merged(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url) as h:
        await h.sim.require_up_to_date(REPO)
        h.sim.set_reviewer(REPO, steps(0, 0))
        key, number, opened = await _behind_pr(h)
        view = await h.wait_status(key, "merged", timeout=60)
        await quiesce(h)

        (update,) = h.sim.effects("branch_update")
        # The precondition is the head the bot converged on, and the update moved it.
        assert update["expected_head"] == opened and update["head"] != opened
        rounds = await h.rounds(key)
        assert [(r.kind, r.status) for r in rounds] == [("review", "converged"), ("review", "converged")]
        assert rounds[1].entry_head == update["head"] == view.pr.converged_head  # the new head reviewed
        (merge,) = h.sim.effects("merge")
        assert merge["expected_head"] == update["head"]
        assert "main moved on" in await _file_on_main(h, "docs/notes.md")
        assert "return 2" in await _file_on_main(h, "app/core.py")
        assert h.sim.forced_pushes() == [] and h.sim.duplicate_effects() == []
        assert await h.escalations(key) == []


async def test_an_update_whose_answer_was_lost_is_not_made_again_on_the_moved_head(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url) as h:
        await h.sim.require_up_to_date(REPO)
        h.sim.set_reviewer(REPO, steps(0, 0))
        # GitHub updates the branch and answers 502: the retry sends the same precondition,
        # which no longer matches the moved head, and GitHub refuses it (422).
        h.sim.chaos(7, lost_ack_rate=1.0, exclude=(NOT_THE_UPDATE,))
        key, number, opened = await _behind_pr(h)
        await h.wait_status(key, "merged", timeout=60)
        await quiesce(h)

        assert h.sim.chaos_counts.get("lost_ack", 0) >= 1
        updates = h.sim.effects("branch_update")
        assert len(updates) == 1, updates  # one merge of main into the branch, however often retried
        assert h.sim.counters.get("PUT", "/repos/{owner}/{repo}/pulls/{number}/update-branch") >= 2
        assert h.sim.forced_pushes() == [] and h.sim.duplicate_effects() == []


async def test_a_push_between_the_decision_and_the_update_is_never_overwritten(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url) as h:
        await h.sim.require_up_to_date(REPO)
        h.sim.set_reviewer(REPO, steps(0, 0, 0))
        # GitHub fails the update (502) until the author has pushed: the retry carries the head
        # the bot decided on, which the push moved, and GitHub refuses it (422).
        h.sim.inject_fault(r"^/repos/[^/]+/[^/]+/pulls/\d+/update-branch$", method="PUT", status=502)
        key, number, opened = await _behind_pr(h)
        puts = "/repos/{owner}/{repo}/pulls/{number}/update-branch"

        async def updating():
            return h.sim.counters.get("PUT", puts) >= 1

        await h.wait_for("the update to be sent", updating, timeout=60)
        await h.sim.push(REPO, "feat", {"app/extra.py": "X = 1\n"}, author="dev")
        pushed = (await h.http_github(f"/repos/{REPO}/pulls/{number}"))["head"]["sha"]
        h.sim.clear_faults()
        await h.wait_status(key, "merged", timeout=60)
        await quiesce(h)

        # One update, of the head the author pushed (reviewed first): none on the head it moved.
        (update,) = h.sim.effects("branch_update")
        assert update["expected_head"] == pushed != opened
        # The refusal is taken as the move it is: asked once, not retried with the stale head.
        assert h.sim.counters.get("PUT", puts, 422) == 1, h.sim.counters.snapshot()["routes"][f"PUT {puts}"]
        assert [r.entry_head for r in await h.rounds(key)][-1] == update["head"]
        assert h.sim.forced_pushes() == [] and h.sim.duplicate_effects() == []
        assert "X = 1" in await _file_on_main(h, "app/extra.py")
        assert "main moved on" in await _file_on_main(h, "docs/notes.md")
