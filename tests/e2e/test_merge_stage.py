"""The merge stage's way back to the fixer, on the simulator: a converged PR that conflicts with
its base gets a conflict round, one whose required checks fail a CI round, each within its
budget, then one escalation naming the files or the checks; GitHub's "unknown" mergeability is
re-read with a growing delay and escalated once as stalled (docs/architecture.md, "Merge stage").
"""

from __future__ import annotations

import asyncio
import contextlib

from .harness import REPO, bot_on_simulator, open_and_enroll, quiesce, steps

BASE_CHANGE = {"app/core.py": "def f():\n    return 3  # changed on main\n"}
CI = "ci/test"
ANNOTATION = {"path": "app/core.py", "start_line": 2, "end_line": 2, "annotation_level": "failure",
              "message": "assert f() == 3"}


async def _merge_commits(h) -> list[dict]:
    return h.sim.effects("merge")


async def _file_on_main(h, path: str) -> str:
    import base64

    body = await h.http_github(f"/repos/{REPO}/contents/{path}?ref=main")
    return base64.b64decode(body["content"]).decode()


def _says(h, key: str, text: str):
    """A check for `h.wait_for`: the converged PR's row says `text` in its last action."""
    async def check():
        v = await h.view(key)
        return v is not None and v.pr.converged_head and text in (v.pr.last_action or "")
    return check


async def _kinds(h, key: str) -> list[tuple[int, str, str | None]]:
    return [(r.round_no, r.kind, r.status) for r in await h.rounds(key)]


async def test_a_conflict_goes_to_the_fixer_and_the_resolved_pr_is_reviewed_and_merged(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url) as h:
        h.sim.set_reviewer(REPO, steps(0, 0))
        key, number = await open_and_enroll(h)
        # main changes the same line after the PR branched: GitHub computes `dirty`.
        await h.sim.push(REPO, "main", BASE_CHANGE, author="dev")
        view = await h.wait_status(key, "merged", timeout=60)

        kinds = await _kinds(h, key)
        assert [k for _, k, _ in kinds] == ["review", "conflict", "review"], kinds
        assert [s for _, _, s in kinds] == ["converged", "addressed", "converged"], kinds
        conflict = (await h.rounds(key))[1]
        assert '"path": "app/core.py"' in conflict.findings and "origin/main" in conflict.findings
        # The head that merged is the fixer's merge of main, reviewed in a round of its own.
        (merge,) = await _merge_commits(h)
        assert merge["expected_head"] == view.pr.converged_head == (await h.rounds(key))[2].entry_head
        assert "return 2" in await _file_on_main(h, "app/core.py")  # the branch's side kept
        assert await h.escalations(key) == []


async def test_a_conflict_beyond_the_budget_escalates_once_naming_the_files(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, merge={"conflict_attempts": 1}) as h:
        h.sim.set_reviewer(REPO, steps(0, 0, 0))
        key, number = await open_and_enroll(h)
        await h.sim.push(REPO, "main", BASE_CHANGE, author="dev")

        async def conflict_round_done():
            return any(k == "conflict" and s == "addressed" for _, k, s in await _kinds(h, key))

        await h.wait_for("the conflict round", conflict_round_done, timeout=60)
        # main moves again over the same line: the one conflict round the budget allows is spent.
        await h.sim.push(REPO, "main", {"app/core.py": "def f():\n    return 4  # again\n"}, author="dev")
        await h.wait_status(key, "escalated", timeout=60)
        await quiesce(h)
        (esc,) = await h.escalations(key)
        assert esc.kind == "conflict" and "`app/core.py`" in esc.question, esc.question
        assert [k for _, k, _ in await _kinds(h, key)].count("conflict") == 1
        assert await _merge_commits(h) == []
        assert sum("`app/core.py`" in c.get("body", "") for c in h.bot_comments(number)) == 1

        # The maintainer answers: the merge stage takes the PR again with a fresh budget, and the
        # next conflict round (main as it is now) is resolved, reviewed and merged.
        await h.sim.comment(REPO, number, "/converge answer Merge main in again.", user="maint")
        await h.wait_status(key, "merged", timeout=60)
        assert [k for _, k, _ in await _kinds(h, key)].count("conflict") == 2
        assert "return 2" in await _file_on_main(h, "app/core.py")


async def _ci(h, verdicts: list[str]):
    """A slow CI: `ci/test` reports on each head of the PR's branch only once the bot converged
    on it (so the review stage never sees it and only the merge stage can); the n-th head gets
    verdicts[n] (the last one repeats). Stops when cancelled."""
    seen: list[str] = []
    while True:
        view = await h.view(f"{REPO}#1")
        head = view.pr.converged_head if view is not None else None
        if head is not None and head not in seen:
            seen.append(head)
            verdict = verdicts[min(len(seen) - 1, len(verdicts) - 1)]
            await h.sim.set_check_run(REPO, head, CI, conclusion=verdict, details_url=f"https://ci.example/{head[:7]}",
                                      output={"title": f"{CI}: {verdict}", "summary": "test_core failed: 2 != 3",
                                              "annotations": [ANNOTATION] if verdict == "failure" else []})
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def _running_ci(h, verdicts: list[str]):
    task = asyncio.create_task(_ci(h, verdicts))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_failing_required_check_gets_a_ci_round_and_the_green_pr_merges(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url) as h:
        # Branch protection requires `ci/test`; the bot's own config names no required check, so
        # the review converges on its own and GitHub's `blocked` is what finds the red check.
        h.sim.set_required_checks(REPO, [CI])
        h.sim.set_reviewer(REPO, steps(0, 0))
        async with _running_ci(h, ["failure", "success"]):
            key, number = await open_and_enroll(h)
            view = await h.wait_status(key, "merged", timeout=60)
        kinds = await _kinds(h, key)
        assert [k for _, k, _ in kinds] == ["review", "ci", "review"], kinds
        ci_round = (await h.rounds(key))[1]
        for shown in (f"`{CI}`", "test_core failed: 2 != 3", "https://ci.example/",
                      "app/core.py:2: failure: assert f() == 3"):
            assert shown in ci_round.findings, ci_round.findings
        (merge,) = await _merge_commits(h)
        assert merge["expected_head"] == view.pr.converged_head


async def test_a_check_red_beyond_the_budget_escalates_once_naming_it(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, merge={"ci_fix_attempts": 1}) as h:
        h.sim.set_required_checks(REPO, [CI])
        h.sim.set_reviewer(REPO, steps(0, 0, 0))
        async with _running_ci(h, ["failure"]):
            key, number = await open_and_enroll(h)
            await h.wait_status(key, "escalated", timeout=60)
            await quiesce(h)
        (esc,) = await h.escalations(key)
        assert esc.kind == "ci" and f"`{CI}`" in esc.question, esc.question
        assert [k for _, k, _ in await _kinds(h, key)] == ["review", "ci", "review"]
        assert await _merge_commits(h) == []


async def test_blocked_with_checks_running_or_reviews_missing_waits_and_says_so(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url) as h:
        h.sim.set_required_checks(REPO, [CI])
        h.sim.set_reviewer(REPO, steps(0))
        key, number = await open_and_enroll(h)

        await h.wait_for("blocked: no check yet", _says(h, key, "blocked by branch protection"), timeout=60)
        head = await h.rt.github.branch_head("acme", "app", "feat")
        await h.sim.set_check_run(REPO, head, CI, status="in_progress")
        await h.wait_for("blocked: the check runs", _says(h, key, f"still running: {CI}"))
        await h.sim.set_check_run(REPO, head, CI, conclusion="success")
        await h.wait_status(key, "merged")
        assert [k for _, k, _ in await _kinds(h, key)] == ["review"]


async def test_unknown_mergeability_is_re_read_with_backoff_then_escalated_once(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, merge={"mergeability_timeout_seconds": 4},
                                poller={"interval_seconds": 3600}) as h:
        h.sim.set_reviewer(REPO, steps(0))
        pr = await h.sim.open_pr(REPO, title="Change", head="feat", author="dev",
                                 files={"app/core.py": "def f():\n    return 2\n"})
        key, number = f"{REPO}#{pr.number}", pr.number
        await h.sim.set_mergeable(REPO, number, "unknown")
        await h.sim.comment(REPO, number, "/converge", user="maint")
        await h.wait_status(key, "escalated", timeout=60)
        await quiesce(h)
        (esc,) = await h.escalations(key)
        assert esc.kind == "mergeability" and "stalled" in esc.question
        # Re-read with a growing delay (2 s, then the wait so far): a handful of PR reads over
        # the 4 s, not one every poll or every half second.
        reads = h.sim.counters.get("GET", "/repos/{owner}/{repo}/pulls/{number}")
        assert reads < 15, reads

        # GitHub has made up its mind by the time a maintainer answers: merged.
        await h.sim.set_mergeable(REPO, number, None)
        await h.sim.comment(REPO, number, "/converge answer Try again.", user="maint")
        view = await h.wait_status(key, "merged", timeout=30)
        assert view.pr.mergeability_unknown_since is None


async def test_merges_github_keeps_refusing_are_tried_a_bounded_number_of_times(tmp_path, db_url):
    from bot.engine.merge_stage import MERGE_TRIES

    async with bot_on_simulator(tmp_path, db_url) as h:
        h.sim.set_reviewer(REPO, steps(0))
        # GitHub says the PR can be merged and refuses every merge (a rule the API does not show).
        h.sim.inject_fault(r"^/repos/[^/]+/[^/]+/pulls/\d+/merge$", method="PUT", status=405)
        key, number = await open_and_enroll(h)
        await h.wait_status(key, "escalated", timeout=60)
        await quiesce(h)
        (esc,) = await h.escalations(key)
        assert esc.kind == "merge" and f"{MERGE_TRIES} merge tries did not merge it" in esc.question
        merges = "/repos/{owner}/{repo}/pulls/{number}/merge"
        assert h.sim.counters.get("PUT", merges) == MERGE_TRIES

        # An answer buys fresh tries: as many again (counted from the answer, not never more,
        # not at once spent), then the same question once more while GitHub still refuses.
        await h.sim.comment(REPO, number, "/converge answer Try again.", user="maint")

        async def asked_again():
            escs = await h.escalations(key)
            return escs if len(escs) == 2 and escs[1].status == "open" else None

        first, second = await h.wait_for("the second escalation", asked_again, timeout=60)
        await quiesce(h)
        assert first.status == "answered" and second.kind == "merge", second.question
        assert h.sim.counters.get("PUT", merges) == 2 * MERGE_TRIES
        # GitHub takes merges again: the next answer merges it.
        h.sim.clear_faults()
        await h.sim.comment(REPO, number, "/converge answer Try once more.", user="maint")
        await h.wait_status(key, "merged", timeout=60)
        assert h.sim.counters.get("PUT", merges) == 2 * MERGE_TRIES + 1


async def test_a_failing_check_branch_protection_does_not_require_is_no_ci_round(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url, poller={"interval_seconds": 1}) as h:
        h.sim.set_required_checks(REPO, [CI])
        h.sim.set_reviewer(REPO, steps(0))
        key, number = await open_and_enroll(h)

        await h.wait_for("converged, blocked", _says(h, key, "blocked by branch protection"), timeout=60)
        head = (await h.view(key)).pr.converged_head
        # Blocked by something else (reviews branch protection requires) once `ci/test` passed;
        # `lint` fails after the convergence, but it is not what blocks the PR.
        await h.sim.set_mergeable(REPO, number, "blocked")
        await h.sim.set_check_run(REPO, head, "lint", conclusion="failure")
        await h.sim.set_check_run(REPO, head, CI, conclusion="success")
        await quiesce(h)
        await h.wait_for("still waiting for reviews", _says(h, key, "required reviews"))
        await h.sim.set_mergeable(REPO, number, None)  # reviews given: `unstable` (lint) merges
        await h.wait_status(key, "merged", timeout=30)
        assert [k for _, k, _ in await _kinds(h, key)] == ["review"]


async def test_a_clean_review_goes_on_to_the_merge_from_the_step_that_read_it(tmp_path, db_url):
    """Converged, no dependency, GitHub says clean: the step that read the clean review decides
    on through the merge stage to `merging` from the same read, with no poll (an hour away) and
    no sync queued by the convergence or by the dependency check."""
    from storage import jobs

    async with bot_on_simulator(tmp_path, db_url, poller={"interval_seconds": 3600}) as h:
        h.sim.set_reviewer(REPO, steps(0))
        key, _ = await open_and_enroll(h)
        await h.wait_status(key, "merged", timeout=60)
        await quiesce(h)
        syncs = [j.key.split(":")[2] for j in await jobs.list_jobs(h.rt.db, key) if j.kind == "sync"]
        assert not {"converged", "waiting_merge"} & set(syncs), syncs
        assert len(await _merge_commits(h)) == 1
