"""A required check that never reports does not hold a PR for ever: the merge stage waits for it
`[merge] checks_timeout_seconds` from the wait on the head, then escalates once naming it; the
maintainer's answer and a green check merge the PR (docs/architecture.md, "Merge stage")."""

from __future__ import annotations

from .harness import REPO, bot_on_simulator, open_and_enroll, quiesce, steps

CI = "ci/test"
TIMEOUT = 3


async def test_a_required_check_that_never_reports_escalates_once_then_merges_after_the_answer(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, merge={"checks_timeout_seconds": TIMEOUT},
                                poller={"interval_seconds": 3600}) as h:
        # Branch protection requires `ci/test`, and no workflow ever reports it.
        h.sim.set_required_checks(REPO, [CI])
        h.sim.set_reviewer(REPO, steps(0))
        key, number = await open_and_enroll(h)
        # The poller is an hour away: the merge stage itself comes back at the deadline.
        view = await h.wait_status(key, "escalated", timeout=60)
        await quiesce(h)
        (esc,) = await h.escalations(key)
        assert esc.kind == "checks_missing" and f"`{CI}`" in esc.question, esc.question
        assert f"within {TIMEOUT} seconds" in esc.question, esc.question
        waited = (view.pr.escalated_at - view.pr.waiting_since).total_seconds()
        assert waited >= TIMEOUT, waited
        assert sum(f"`{CI}`" in c.get("body", "") for c in h.bot_comments(number)) == 1
        assert h.sim.effects("merge") == []
        # The check run says whom the PR now waits on, and since when.
        head = view.pr.converged_head
        since = view.pr.escalated_at.strftime("%Y-%m-%d %H:%M UTC")

        async def says_waiting():
            runs = [r for r in await h.rt.github.check_runs("acme", "app", head) if r["name"] == "convergebot"]
            summary = runs[0]["output"]["summary"] if runs else ""
            return f"**Waiting on:** maintainer: a maintainer's answer since {since}" in summary

        await h.wait_for("the check run to say whom the PR waits on", says_waiting)

        # The maintainer fixes the workflow: the check reports green, and the answer merges it.
        await h.sim.set_check_run(REPO, head, CI, conclusion="success")
        await h.sim.comment(REPO, number, "/converge answer The workflow's trigger is fixed.", user="maint")
        view = await h.wait_status(key, "merged", timeout=60)
        assert [e.kind for e in await h.escalations(key)] == ["checks_missing"]
        (merge,) = h.sim.effects("merge")
        assert merge["expected_head"] == head


async def test_a_clean_review_whose_required_check_never_reports_escalates_once_then_converges(tmp_path, db_url):
    """`[convergence] required_checks` holds a clean review back until the check is green: one that
    never reports escalates once (review_checks); the answer asks the review again, which with
    the check green converges and merges."""
    async with bot_on_simulator(tmp_path, db_url, convergence={"required_checks": [CI]},
                                merge={"checks_timeout_seconds": TIMEOUT}, poller={"interval_seconds": 1}) as h:
        h.sim.set_reviewer(REPO, steps(0, 0))
        key, number = await open_and_enroll(h)
        view = await h.wait_status(key, "escalated", timeout=60)
        await quiesce(h)
        (esc,) = await h.escalations(key)
        assert esc.kind == "review_checks" and f"`{CI}`" in esc.question, esc.question
        assert view.pr.converged_head is None and h.sim.effects("merge") == []

        head = await h.rt.github.branch_head("acme", "app", "feat")
        await h.sim.set_check_run(REPO, head, CI, conclusion="success")
        await h.sim.comment(REPO, number, "/converge answer CI runs again.", user="maint")
        view = await h.wait_status(key, "merged", timeout=60)
        assert [e.kind for e in await h.escalations(key)] == ["review_checks"]
        assert view.pr.converged_head == head
