"""A converged PR that branch protection holds `blocked` for want of approving reviews says whose
it waits for and how many are required: the reviewers requested on it, or anyone with write
access, with the count the base branch's rule names; approved, it merges (on the simulator)."""

from __future__ import annotations

from bot.rules.merge import APPROVAL_WANTED

from .harness import REPO, bot_on_simulator, open_and_enroll, steps


def _says(h, key: str, text: str):
    """A check for `h.wait_for`: the converged PR's row says exactly `text` as its last action."""
    async def check():
        v = await h.view(key)
        return v is not None and v.pr.status == "waiting_merge" and v.pr.last_action == text
    return check


async def test_a_pr_blocked_for_approvals_names_whose_and_how_many_then_merges_once_given(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, poller={"interval_seconds": 1}) as h:
        h.sim.set_required_reviews(REPO, 2)
        h.sim.set_reviewer(REPO, steps(0))  # Copilot's clean review: converged, then blocked
        key, number = await open_and_enroll(h)
        api = f"/api/prs/{REPO}/{number}"

        # Nobody asked: anyone with write access, two approvals.
        await h.wait_for("blocked for approvals", _says(h, key, APPROVAL_WANTED + "someone with write access (2 required)"),
                         timeout=60)
        shown = (await h.http.get(api)).json()
        assert shown["waiting_on"] == "reviewer: an approving review from someone with write access (2 required)"
        assert shown["last_action"] == APPROVAL_WANTED + "someone with write access (2 required)"

        # A reviewer requested on the PR (by its author) is named.
        await h.sim.request_reviewers(REPO, number, ["maint"], actor="dev")
        await h.wait_for("the requested reviewer named", _says(h, key, APPROVAL_WANTED + "maint (2 required)"))
        assert (await h.http.get(api)).json()["waiting_on"] == "reviewer: an approving review from maint (2 required)"

        # One approval of two, and one from someone who cannot write: still blocked, nobody
        # requested any more.
        await h.sim.submit_review(REPO, number, user="maint", state="APPROVED")
        await h.sim.submit_review(REPO, number, user="reader", state="APPROVED")
        await h.wait_for("one approval short", _says(h, key, APPROVAL_WANTED + "someone with write access (2 required)"))
        assert h.sim.effects("merge") == []

        await h.sim.submit_review(REPO, number, user="admin", state="APPROVED")
        await h.wait_status(key, "merged", timeout=30)
        assert len(h.sim.effects("merge")) == 1

