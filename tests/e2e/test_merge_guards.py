"""The merge against the simulator: never code nobody reviewed, never a blind second try."""

from __future__ import annotations

from .harness import REPO, bot_on_simulator, open_and_enroll, quiesce, steps

MERGE_ROUTE = "/repos/{owner}/{repo}/pulls/{number}/merge"
MERGE_PATH = r"^/repos/[^/]+/[^/]+/pulls/\d+/merge$"
NOT_THE_MERGE = r"^(?!/repos/[^/]+/[^/]+/pulls/\d+/merge$)"  # chaos spares every other path


def _merge_puts(h, status: int | None = None) -> int:
    return h.sim.counters.get("PUT", MERGE_ROUTE, status)


def _tries(h) -> dict:
    """The merge PUTs GitHub answered, by status."""
    return h.sim.counters.snapshot()["routes"].get(f"PUT {MERGE_ROUTE}", {})


def _when(condition):
    """`condition` (a plain function) as the coroutine function `wait_for` polls."""
    async def check():
        return condition()
    return check


async def test_a_push_after_convergence_is_refused_by_the_merge_not_merged_unreviewed(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url) as h:
        h.sim.set_reviewer(REPO, steps(0))
        # GitHub cannot take merges for now: the bot converges head A and its merge effect retries.
        h.sim.inject_fault(MERGE_PATH, method="PUT", status=503)
        key, number = await open_and_enroll(h)
        await h.wait_for("a first merge try", _when(lambda: _merge_puts(h, 503) >= 1))
        view = await h.view(key)
        head_a = view.pr.converged_head
        assert head_a == await h.rt.github.branch_head("acme", "app", "feat")

        # Someone pushes B while the merge of A is still to be done; then GitHub is back.
        head_b = await h.sim.push(REPO, "feat", {"app/util.py": "X = 2  # not reviewed\n"}, author="dev")
        h.sim.clear_faults()
        await h.wait_for("the merge try after the push",
                         _when(lambda: _merge_puts(h) > _merge_puts(h, 503)))
        assert _merge_puts(h, 409) == 1, _tries(h)
        gh_pr = await h.rt.github.pull("acme", "app", number)
        assert (gh_pr["state"], gh_pr["merged"]) == ("open", False)
        assert await h.rt.github.branch_head("acme", "app", "feat") == head_b
        assert h.sim.effects("merge") == []

        # The bot reviews B in a round of its own, and only then merges it.
        view = await h.wait_status(key, "merged", timeout=60)
        (merge,) = h.sim.effects("merge")
        assert merge["expected_head"] == head_b == view.pr.converged_head
        assert [(r.round_no, r.status, r.exit_head) for r in await h.rounds(key)] == [
            (1, "converged", head_a), (2, "converged", head_b)]


async def test_a_merge_whose_answer_was_lost_is_not_tried_again(tmp_path, db_url):
    # No poller and (from the approval on) no webhooks: only the merge effect's retry can see
    # that its first try merged.
    async with bot_on_simulator(tmp_path, db_url, merge={"require_approval": True},
                                poller={"interval_seconds": 3600}) as h:
        h.sim.set_reviewer(REPO, steps(0))
        # Every merge is made by GitHub and then answered 502.
        h.sim.chaos(5, lost_ack_rate=1.0, exclude=(NOT_THE_MERGE,))
        key, number = await open_and_enroll(h)

        async def waiting_for_approval():
            v = await h.view(key)
            return v is not None and "`/converge merge`" in (v.pr.last_action or "")

        await h.wait_for("convergence, waiting for approval", waiting_for_approval)
        await h.sim.comment(REPO, number, "/converge merge", user="maint")
        # Decided at emit: the approval above is delivered, nothing after it (the merge's
        # `closed` and `push`) is, so nothing but the effect tells the bot the PR merged.
        h.sim.webhook_faults(drop_all=True)

        async def settled():
            v = await h.view(key)
            return (v is not None and v.pr.status == "merged") or _merge_puts(h) >= 2

        await h.wait_for("the merge to be recorded (or tried again)", settled)
        assert h.sim.chaos_counts.get("lost_ack") == 1
        assert _merge_puts(h) == 1, _tries(h)
        assert len(h.sim.effects("merge")) == 1
        view = await h.view(key)
        assert (view.pr.status, view.pr.outcome, view.run_state) == ("merged", "merged", "completed")
        assert await h.escalations(key) == []
        await quiesce(h)
        assert _merge_puts(h) == 1


async def test_two_steps_deciding_a_conflict_round_from_one_read_dispatch_one_fixer(tmp_path, db_url):
    from sqlmodel import select

    from bot.engine import merge_stage as merging
    from storage.models import Job

    # Approval required: the converged PR waits in `waiting_merge` while main moves under it.
    async with bot_on_simulator(tmp_path, db_url, merge={"require_approval": True},
                                poller={"interval_seconds": 3600}) as h:
        h.sim.set_reviewer(REPO, steps(0, 0))
        key, number = await open_and_enroll(h)

        async def waiting_for_approval():
            v = await h.view(key)
            return v is not None and "`/converge merge`" in (v.pr.last_action or "")

        await h.wait_for("convergence, waiting for approval", waiting_for_approval)
        await h.sim.push(REPO, "main", {"app/core.py": "def f():\n    return 3\n"}, author="dev")
        await quiesce(h)
        # Two deciders (another replica, a step that read before this one wrote) with the same
        # read: the approved row and the dirty PR. Both decide a conflict round; one dispatches.
        read = (await h.view(key)).pr.model_copy(update={"merge_approved": True})
        gh_pr = await h.rt.github.pull("acme", "app", number)
        assert gh_pr["mergeable_state"] == "dirty"
        async with h.rt.step_locks.hold(key):
            for _ in range(2):
                await merging.merge_stage(h.rt, read, gh_pr, merging.log.bind(pr_key=key))
        async with h.rt.db.session() as s:
            fixes = (await s.exec(select(Job.key).where(Job.pr_key == key, Job.kind == "fix"))).all()
        assert len(fixes) == 1, fixes
        (rnd,) = [r for r in await h.rounds(key) if r.kind == "conflict"]
        assert (rnd.round_no, rnd.attempt) == (read.current_round + 1, 0)


async def test_two_merge_stage_steps_deciding_the_merge_from_one_read_queue_one_merge(tmp_path, db_url):
    import structlog

    from bot.engine import merge_stage
    from storage import jobs, prs

    # No poller: only this test's two deciders take the approved PR's step.
    async with bot_on_simulator(tmp_path, db_url, merge={"require_approval": True},
                                poller={"interval_seconds": 3600}) as h:
        h.sim.set_reviewer(REPO, steps(0))
        key, number = await open_and_enroll(h)

        async def waiting_for_approval():
            v = await h.view(key)
            return v if v is not None and "`/converge merge`" in (v.pr.last_action or "") else None

        view = await h.wait_for("convergence, waiting for approval", waiting_for_approval)
        await quiesce(h)
        # The approval as a row write alone, which wakes no step.
        async with h.rt.db.session() as s:
            assert await prs.fenced_update(None, key, view.pr.process_key, {"merge_approved": True}, session=s)
        pr = (await h.view(key)).pr
        gh_pr = await h.rt.github.pr(key).read()
        bound = structlog.get_logger().bind(pr_key=key)
        # Two deciders from one read of the row and of GitHub: both decide the merge.
        await merge_stage.merge_stage(h.rt, pr, gh_pr, bound)
        await merge_stage.merge_stage(h.rt, pr, gh_pr, bound)

        merges = [j for j in await jobs.list_jobs(h.rt.db, key)
                  if j.kind == "effect" and '"effect": "merge"' in j.payload]
        assert len(merges) == 1, [j.key for j in merges]
        await h.wait_status(key, "merged", timeout=30)
        await quiesce(h)
        assert _merge_puts(h) == 1, _tries(h)
