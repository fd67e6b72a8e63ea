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
        # The one REST merge is how the bot learns of the queue: refused (405), nothing merged.
        assert (h.sim.counters.get("PUT", MERGE_ROUTE), h.sim.counters.get("PUT", MERGE_ROUTE, 405)) == (1, 1)

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
        assert h.sim.counters.get("PUT", MERGE_ROUTE) == 1
        assert h.sim.duplicate_effects() == []


async def test_a_pr_the_queue_removes_for_a_failing_check_goes_to_the_fixer_then_is_queued_again(tmp_path, db_url):
    with structlog.testing.capture_logs() as logs:
        async with bot_on_simulator(tmp_path, db_url) as h:
            await h.sim.require_merge_queue(REPO, checks=["ci"])
            h.sim.set_reviewer(REPO, steps(0, 0))
            key, number = await open_and_enroll(h)
            group = await _queued(h, key)
            first_head = (await h.view(key)).pr.converged_head

            await h.sim.set_check_run(REPO, group, "ci", conclusion="failure",
                                      output={"title": "2 tests failed", "summary": "test_core failed"})
            # Out of `merging`: queueing the same head again would fail the same way, so the
            # group's failing check goes to the fixer in a CI round; the fixed head is reviewed,
            # converges and is queued in a new merge group.
            again = await _queued(h, key, besides=group)
            dequeued = [e for e in logs if e["event"] == "merge.dequeued"]
            assert [(e["pr_key"], e["reason"], e["group"], e["then"]) for e in dequeued] == [
                (key, f"removed from the merge queue: `ci` failure on merge group {group[:7]}", group, "ci round")]
            kinds = [(r.kind, r.status) for r in await h.rounds(key)]
            assert kinds == [("review", "converged"), ("ci", "addressed"), ("review", "converged")], kinds
            ci_round = (await h.rounds(key))[1]
            assert "`ci`" in ci_round.findings and "2 tests failed" in ci_round.findings
            entries = _enqueues(h, number)
            second_head = (await h.view(key)).pr.converged_head
            assert second_head != first_head
            assert [(e["group_sha"], e["expected_head"]) for e in entries] == [(group, first_head), (again, second_head)]
            assert h.sim.effects("merge") == []

            # The new group passes: merged.
            await h.sim.set_check_run(REPO, again, "ci")
            view = await h.wait_status(key, "merged", timeout=60)
            assert view.pr.outcome == "merged"
            assert await h.rt.github.branch_head("acme", "app", "main") == again
            assert h.sim.duplicate_effects() == []
            # One REST merge in all: the first, refused for the queue, taught the process.
            assert h.sim.counters.get("PUT", MERGE_ROUTE) == 1
