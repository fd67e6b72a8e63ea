"""A PR from a fork, end to end: with `fixer.allow_forks` off the fixer never runs on its code and
the maintainers are asked; on, it pushes to the fork only where the author allows edits by
maintainers, and the progress check reads the fork's branch."""

from __future__ import annotations

from bot.engine.fixing import fix
from bot.fixers import ScriptedFixer
from storage import jobs

from .harness import REPO, Recording, bot_on_simulator, quiesce, steps

FORK = "dev/app"


async def open_from_fork(h, *, maintainer_can_modify: bool) -> tuple[str, int]:
    # The base has a branch of the fork's branch's name: the PR's head must never be read there.
    await h.sim.push(REPO, "feat", {"app/util.py": "X = 'the base branch of that name'\n"})
    await h.sim.fork_repo(REPO, "dev")
    pr = await h.sim.open_pr(REPO, title="From a fork", head="feat", author="dev", head_repo=FORK,
                             files={"app/core.py": "def f():\n    return 2\n"},
                             maintainer_can_modify=maintainer_can_modify)
    await h.sim.comment(REPO, pr.number, "/converge", user="maint")
    return f"{REPO}#{pr.number}", pr.number


def pushes_to(h, repo: str) -> list[dict]:
    return [u for u in h.sim.ref_updates if u["repo"] == repo]


async def escalation_comments(h, number: int, esc_id: int) -> list[dict]:
    return [c for c in h.bot_comments(number) if f"convergebot escalation #{esc_id}" in c["body"]]


async def test_forks_off_nothing_is_cloned_or_run_and_the_maintainers_are_asked_once(tmp_path, db_url):
    fixer = Recording(ScriptedFixer(["push"]))
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer, poller={"interval_seconds": 0.5}) as h:
        h.sim.set_reviewer(REPO, steps(1, 0))
        key, number = await open_from_fork(h, maintainer_can_modify=True)
        fork_moves = len(pushes_to(h, FORK))
        view = await h.wait_status(key, "escalated")
        (esc,) = await h.escalations(key)
        assert (esc.kind, esc.status, esc.round_no) == ("fork", "open", 1)
        assert "fixer.allow_forks" in esc.question and f"`{FORK}:feat`" in esc.question
        assert fixer.requests == []  # the fixer was never handed the PR: nothing cloned, nothing run
        assert len(pushes_to(h, FORK)) == fork_moves
        (rnd,) = await h.rounds(key)
        assert rnd.status == "blocked" and view.pr.head_repo == FORK
        await h.wait_for("the escalation comment", lambda: escalation_comments(h, number, esc.id))

        # Asked once: the poller's later steps of the escalated PR ask nothing more.
        seen = view.pr.synced_at

        async def synced_again():
            v = await h.view(key)
            return v.pr.synced_at is not None and v.pr.synced_at > seen

        await h.wait_for("a later step of the escalated PR", synced_again)
        await quiesce(h)
        assert len(await h.escalations(key)) == 1
        assert len(await escalation_comments(h, number, esc.id)) == 1

        # As the escalation says: the author pushes a fix to the fork, a maintainer answers, and
        # the next round reviews it; still nothing ran here.
        await h.sim.push(FORK, "feat", {"app/core.py": "def f():\n    return 3\n"}, author="dev")
        await h.sim.comment(REPO, number, "/converge answer pushed a fix", user="maint")
        view = await h.wait_status(key, "merged", timeout=60)
        assert [r.status for r in await h.rounds(key)] == ["addressed", "converged"]
        assert fixer.requests == []


async def test_forks_on_a_fork_maintainers_cannot_edit_is_escalated_not_pushed(tmp_path, db_url):
    fixer = Recording(ScriptedFixer(["push"]))
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer, fixer_config={"allow_forks": True}) as h:
        h.sim.set_reviewer(REPO, steps(1))
        key, number = await open_from_fork(h, maintainer_can_modify=False)
        fork_moves = len(pushes_to(h, FORK))
        await h.wait_status(key, "escalated")
        (esc,) = await h.escalations(key)
        assert esc.kind == "fork" and "does not allow maintainers to edit" in esc.question
        assert "@dev" in esc.question and "Allow edits by maintainers" in esc.question
        assert fixer.requests == []
        await quiesce(h)
        # The fix job delivered again (at-least-once) asks nothing more, and still runs nothing.
        (job,) = [j for j in await jobs.list_jobs(h.rt.db, key) if j.kind == "fix"]
        await fix(h.rt, job)
        await quiesce(h)
        assert fixer.requests == []
        assert len(pushes_to(h, FORK)) == fork_moves, "the bot pushed to a fork it may not edit"
        assert len(await h.escalations(key)) == 1
        assert len(await escalation_comments(h, number, esc.id)) == 1


async def test_forks_on_the_fixer_pushes_to_the_fork_and_the_round_reads_it_there(tmp_path, db_url):
    fixer = Recording(ScriptedFixer(["push"]))
    async with bot_on_simulator(tmp_path, db_url, fixer=fixer, fixer_config={"allow_forks": True}) as h:
        h.sim.set_reviewer(REPO, steps(1, 0))
        key, number = await open_from_fork(h, maintainer_can_modify=True)
        base_feat = await h.rt.github.branch_head("acme", "app", "feat")
        view = await h.wait_status(key, "merged", timeout=60)
        assert await h.escalations(key) == []  # no `no_advance`: the check read the fork's branch
        first, second = await h.rounds(key)
        assert (first.status, second.status) == ("addressed", "converged")
        (req,) = fixer.requests
        assert req.clone_url == h.sim.repo(FORK).git_dir.as_uri() and req.head_branch == "feat"
        # The fixer's push landed on the fork's branch, and the next round started from it.
        (pushed,) = [u for u in pushes_to(h, FORK) if u["via"] == "git"]
        assert pushed["ref"] == "refs/heads/feat" and pushed["new"] == first.exit_head == second.entry_head
        assert await h.rt.github.branch_head("acme", "app", "feat") == base_feat
        assert view.pr.converged_head == first.exit_head
