#!/usr/bin/env python3
"""The guard catalogue, executable: each guard is broken on purpose and its named test must fail.

Every entry names a guard, the code that is the guard (an exact snippet in one file), the same
code with the guard removed, and the test that must go red. Each mutation runs in a throwaway
`git worktree` of HEAD, so the working tree is never touched. Run with `make guards`; pass
words to run only entries whose name contains one of them. Exits non-zero if any mutation
survives or any snippet no longer matches the code (keep this file in step with the code).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Guard:
    name: str
    path: str
    guard: str
    broken: str
    test: str


CATALOGUE = [
    Guard("check run: a lost create is found on its head, not made twice",
          "bot/engine/checkrun.py",
          "        if run_id is None:\n            # A create", "        if False:\n            # A create",
          "tests/e2e/test_outbox.py::test_a_check_run_whose_create_answer_is_lost_is_found_again_not_duplicated"),
    Guard("review request: who reviewed since the decision is not asked again",
          "bot/effects.py", "if r.lower() not in reviewed]", "]",
          "tests/e2e/test_outbox.py::test_lost_answers_on_every_kind_of_write_repeat_nothing"),
    Guard("review request: a reviewer already pending is not asked again",
          "bot/github/client.py", "wanted = [r for r in reviewers if r.lower() not in pending]",
          "wanted = list(reviewers)",
          "tests/e2e/test_escalations.py::test_review_never_arrives_one_nudge_per_window_then_escalation"),
    Guard("progress-check: an unreadable head comes back later instead of ending",
          "bot/engine/progress.py",
          '        raise Unavailable(f"progress-check: head unreadable ({e})") from e', "        return",
          "tests/e2e/test_outbox.py::test_a_progress_check_that_cannot_read_the_head_comes_back_instead_of_ending"),
    Guard("liveness watchdog: a round no job will close is healed",
          "bot/liveness.py", "    if not suspects:\n        return 0", "    if True:\n        return 0",
          "tests/e2e/test_outbox.py::test_the_watchdog_heals_a_round_whose_every_job_gave_up"),
    Guard("rounds.next_attempt: two checks of one attempt start one rerun",
          "storage/rounds.py",
          "(*where, Round.attempt == expect_attempt, Round.status.is_(None)) if expect_attempt is not None else where",
          "where", "tests/integration/test_round_fences.py"),
    Guard("rounds.update_round(open_only): a decided round is not decided again",
          "storage/rounds.py", "        conds.append(Round.status.is_(None))", "        pass",
          "tests/integration/test_round_fences.py"),
    Guard("memory: a remembered churn answer moves to the next round, not a rerun",
          "bot/engine/decide.py", "        if esc.fingerprint not in memory:\n", "        if True:\n",
          "tests/unit/test_decide.py tests/e2e/test_runaway.py::test_after_a_churn_answer_the_run_moves_on_and_stays_bounded"),
    Guard("memory: remembered reruns count against the round's one rerun cap",
          "bot/engine/decide.py", "if esc.fingerprint in memory and can_rerun:", "if esc.fingerprint in memory:",
          "tests/unit/test_decide.py"),
    Guard("budget: a run past its write budget is paused and escalated",
          "bot/effects.py", "        if why is not None:", "        if False:",
          "tests/e2e/test_runaway.py::test_a_run_past_its_write_budget_is_paused_and_escalated_once"),
    Guard("lost intent: an answer whose webhook never came is found on the escalated PR",
          "bot/commands/recover.py", "    if pr.escalated_at is None:\n        return 0",
          "    if True:\n        return 0",
          "tests/e2e/test_commands.py::test_an_answer_whose_webhook_is_lost_is_found_by_the_poller"),
    Guard("thread reply: read, check and post under the PR's lock, so one reply per thread",
          "bot/engine/threads.py", "    async with rt.github.mutating(pr_key):", "    if True:",
          "tests/integration/test_github_client.py::test_two_replies_to_one_thread_at_once_post_one"),
    Guard("findings wait while our replies and resolves are still in the outbox",
          "bot/engine/decide.py", "    if s.threads_settling:", "    if False:",
          "tests/unit/test_decide.py"),
    Guard("check run: look and create under the PR's lock, so two updates make one run",
          "bot/engine/checkrun.py", "    async with rt.github.mutating(pr_key):\n        run_id",
          "    if True:\n        run_id",
          "tests/e2e/test_outbox.py::test_two_check_run_updates_at_once_make_one_run"),
    Guard("lost intent: an edited comment is never recovered as a command",
          "bot/commands/recover.py", 'if comment.get("updated_at") != comment.get("created_at"):',
          "if False:",
          "tests/e2e/test_commands.py::test_an_edited_comment_is_never_recovered_as_a_command"),
    Guard("one write: an unknown PR's abandon and its run's end are one transaction",
          "bot/engine/step.py",
          '        won = await prs.fenced_update(None, pr_key, pk, values, session=s)\n'
          '        if won:\n            await runs.end_run(None, pk, state, values["outcome"], session=s)',
          '        won = await prs.fenced_update(None, pr_key, pk, values, session=s)\n'
          '    if won:\n        import asyncio; await asyncio.sleep(0.5)\n'
          '        await runs.end_run(rt.db, pk, state, values["outcome"])',
          "tests/e2e/test_polling.py::test_a_pr_that_does_not_exist_ends_its_run_instead_of_polling_404s"),
]


def run(guard: Guard, tree: Path) -> tuple[bool, str]:
    target = tree / guard.path
    source = target.read_text()
    if guard.guard not in source:
        return False, "the guard's code is not in the file any more: update the catalogue"
    target.write_text(source.replace(guard.guard, guard.broken, 1))
    try:
        env = {**os.environ, "PYTHONPATH": str(tree), "CONVERGEBOT_TEST_BACKENDS": "sqlite"}
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *guard.test.split()],
            cwd=tree, env=env, capture_output=True, text=True, timeout=600)
    finally:
        target.write_text(source)
    summary = next((line for line in reversed(result.stdout.splitlines()) if " in " in line), "")
    return result.returncode != 0, summary


def main(words: list[str]) -> int:
    chosen = [g for g in CATALOGUE if not words or any(w in g.name for w in words)]
    survived = 0
    with tempfile.TemporaryDirectory(prefix="convergebot-guards-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(tree), "HEAD"], cwd=ROOT, check=True)
        try:
            for guard in chosen:
                caught, summary = run(guard, tree)
                survived += not caught
                print(f"{'caught  ' if caught else 'SURVIVED'} {guard.name}  [{summary}]", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)
    print(f"{len(chosen) - survived} of {len(chosen)} guards caught by their tests")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
