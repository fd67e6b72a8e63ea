"""A base branch that takes changes only through GitHub's merge queue, against the simulator:
the PR is queued (once, even when the enqueue's answer is lost), merged by the queue once its
checks pass on the merge group, and sent back to the merge stage when a check fails there."""

from __future__ import annotations

import structlog

from .harness import REPO, bot_on_simulator, open_and_enroll, quiesce, steps

MERGE_ROUTE = "/repos/{owner}/{repo}/pulls/{number}/merge"
NOT_GRAPHQL = r"^(?!/graphql$)"  # chaos spares every other path


def _enqueues(h, number: int) -> list[dict]:
    return [e for e in h.sim.effects("enqueue") if e["number"] == number]


async def _queued(h, key: str, besides: str | None = None) -> str:
    """Wait for the row to say the PR is in the merge queue (in a group other than `besides`);
    the group's sha."""
    async def check():
        v = await h.view(key)
        action = (v and v.pr.last_action) or ""
        if v is None or v.pr.status != "merging" or "in the merge queue" not in action:
            return None
        group = action.rsplit("merge group ", 1)[-1].rstrip(")")
        return group if "(merge group " in action and group != besides else None

    return await h.wait_for("the PR in the merge queue", check, timeout=60)


async def test_the_enqueue_whose_answer_was_lost_is_not_made_again_and_the_queue_merges(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url) as h:
        await h.sim.require_merge_queue(REPO, checks=["ci"])
        h.sim.set_reviewer(REPO, steps(0))
        # Every GraphQL write is made and then answered 502; with no threads to reply to, the
        # enqueue is the only one.
        h.sim.chaos(11, lost_ack_rate=1.0, exclude=(NOT_GRAPHQL,))
        key, number = await open_and_enroll(h)

        group = await _queued(h, key)
        h.sim.chaos_off()
        assert h.sim.chaos_counts.get("lost_ack") == 1
        view = await h.view(key)
        (enqueue,) = _enqueues(h, number)
        assert (enqueue["new"], enqueue["expected_head"], enqueue["group_sha"]) == (True, view.pr.converged_head, group)
        assert view.pr.last_action == f"in the merge queue, position 1 (merge group {group})"
        assert h.sim.counters.get("PUT", MERGE_ROUTE) == 0  # never a REST merge on a queue branch

        # The queue's check passes on the merge group: GitHub merges it, and the bot sees it.
        await h.sim.set_check_run(REPO, group, "ci")
        view = await h.wait_status(key, "merged", timeout=60)
        assert (view.pr.outcome, view.run_state) == ("merged", "completed")
        (merge,) = h.sim.effects("merge")
        assert (merge["method"], merge["sha"], merge["expected_head"]) == ("merge_queue", group, view.pr.converged_head)
        assert await h.rt.github.branch_head("acme", "app", "main") == group
        assert await h.escalations(key) == []
        await quiesce(h)
        assert len(_enqueues(h, number)) == 1
        assert h.sim.counters.get("PUT", MERGE_ROUTE) == 0
        assert h.sim.duplicate_effects() == []


async def test_a_pr_the_queue_removes_for_a_failing_check_goes_back_to_the_merge_stage(tmp_path, db_url):
    with structlog.testing.capture_logs() as logs:
        async with bot_on_simulator(tmp_path, db_url) as h:
            await h.sim.require_merge_queue(REPO, checks=["ci"])
            h.sim.set_reviewer(REPO, steps(0))
            key, number = await open_and_enroll(h)
            group = await _queued(h, key)

            await h.sim.set_check_run(REPO, group, "ci", conclusion="failure",
                                      output={"title": "2 tests failed", "summary": "test_core failed"})
            # Out of `merging` with the group's failing check as the reason; the merge stage then
            # decides again (here: queue the same head again, in a new merge group).
            again = await _queued(h, key, besides=group)
            dequeued = [e for e in logs if e["event"] == "merge.dequeued"]
            assert [(e["pr_key"], e["reason"], e["group"]) for e in dequeued] == [
                (key, f"removed from the merge queue: `ci` failure on merge group {group[:7]}", group)]
            gh_pr = await h.rt.github.pull("acme", "app", number)
            assert (gh_pr["state"], gh_pr["merged"]) == ("open", False)
            entries = _enqueues(h, number)
            assert [(e["group_sha"], e["new"]) for e in entries] == [(group, True), (again, True)]
            assert entries[0]["entry"] != entries[1]["entry"]
            assert h.sim.effects("merge") == []

            # The new group passes: merged.
            await h.sim.set_check_run(REPO, again, "ci")
            view = await h.wait_status(key, "merged", timeout=60)
            assert view.pr.outcome == "merged"
            assert await h.rt.github.branch_head("acme", "app", "main") == again
            assert h.sim.duplicate_effects() == []
