"""Stacked PRs against the simulator (docs/stacks.md): a PR based on another PR's branch
converges on its own diff, waits for its parent, and once the parent lands is retargeted to the
parent's base and re-based onto it with only its own commits, reviewed again on that head and
merged; a re-base that conflicts becomes a conflict round; a parent merged by hand, its branch
deleted and GitHub's own retarget made, is taken as it is."""

from __future__ import annotations

from storage.keys import PrKey, parse_pr_key

from .harness import REPO, bot_on_simulator, quiesce, steps
from .test_dependencies import _cli_status

PULL = "/repos/{owner}/{repo}/pulls/{number}"


async def _open_stack(h, names=("a", "b", "c"), *, enroll=True) -> list[tuple[PrKey, int]]:
    """A ← B ← C: each PR based on the branch of the one before, each adding its own file and
    left one finding on it by its first review."""
    out, base = [], None
    for name in names:
        pr = await h.sim.open_pr(REPO, title=f"Stack {name}", head=f"stack-{name}", base=base, author="dev",
                                 files={f"app/{name}.py": f"{name.upper()} = 1\n"})
        h.sim.set_reviewer(REPO, steps(1, 0, path=f"app/{name}.py"), number=pr.number)
        out.append((parse_pr_key(f"{REPO}#{pr.number}"), pr.number))
        base = f"stack-{name}"
    if enroll:
        for _, number in out:
            await h.sim.comment(REPO, number, "/converge", user="maint")
    return out


async def _own_commits(h, head: str) -> list[str]:
    """The commits of `head` that main did not have where the two parted (the simulator's git)."""
    git, where = h.sim.git, h.sim.repo(REPO).git_dir
    fork = await git.merge_base(where, head, await git.branch_sha(where, "main"))
    return [c.sha for c in await git.commits_between(where, fork, head)]


async def _contains(h, head: str, commit: str) -> bool:
    return await h.sim.git.is_ancestor(h.sim.repo(REPO).git_dir, commit, head)


def _forced(h) -> list[dict]:
    return [u for u in h.sim.forced_pushes() if not u["deleted"]]


async def test_a_three_pr_stack_lands_bottom_up_each_rebased_onto_main_with_only_its_own_commits(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url) as h:
        stack = await _open_stack(h, enroll=False)
        (a, na), (b, nb), (c, nc) = stack
        # The whole stack enrolled at once, from its top.
        await h.sim.comment(REPO, nc, "/converge start --stack", user="maint")
        originals = {n: h.sim.pr(REPO, n)[1].last_head for _, n in stack}
        for key, _ in stack:
            await h.wait_status(key, "merged", timeout=180)
        await quiesce(h)

        merges = h.sim.effects("merge")
        assert [m["number"] for m in merges] == [na, nb, nc]  # bottom-up
        assert {m["method"] for m in merges} == {"squash"}
        # B and C were retargeted to main by the bot (nobody deleted the branches).
        retargets = [e for e in h.sim.effects("pr_edited") if e["fields"] == ["base"]]
        assert sorted(e["number"] for e in retargets) == [nb, nc]
        assert all(h.sim.pr(REPO, n)[1].base_ref == "main" for _, n in stack)
        # Each child was re-based once, leased on a head the bot had read (the one it converged
        # on), and the re-based head is the one reviewed and merged.
        forced = _forced(h)
        assert sorted(u["ref"] for u in forced) == ["refs/heads/stack-b", "refs/heads/stack-c"], forced
        for key, number in ((b, nb), (c, nc)):
            (push,) = [u for u in forced if u["ref"] == f"refs/heads/stack-{'b' if number == nb else 'c'}"]
            rounds = await h.rounds(key)
            assert push["old"] in {r.entry_head for r in rounds} | {r.exit_head for r in rounds}
            assert rounds[-1].entry_head == push["new"]
            assert rounds[-1].status == "converged"
            merge = next(m for m in merges if m["number"] == number)
            assert merge["expected_head"] == push["new"]
            # Only its own commits (its first and its fix), on main as it was when re-based: none
            # of its parents' commits as they were before they landed.
            assert len(await _own_commits(h, push["new"])) == 2
            below = [n for _, n in stack if n < number]
            assert not [n for n in below if await _contains(h, push["new"], originals[n])]
        assert h.sim.duplicate_effects() == []
        assert [await h.escalations(k) for k, _ in stack] == [[], [], []]

        # Where people and programs see the stack's order (bottom first: the order it lands in).
        order = [str(a), str(b), str(c)]
        shown = (await h.http.get(f"/api/prs/{str(b).replace('#', '/')}")).json()
        assert shown["stack"] == order and shown["dependency_sources"] == {str(a): ["stack"]}
        listed = {r["pr_key"]: r for r in (await h.http.get("/api/prs?scope=all")).json()}
        assert [listed[k]["stack"] for k in order] == [order] * 3
        assert f"stack #{na} → [#{nb}] → #{nc}" in await _cli_status(db_url)
        page = (await h.http.get(f"/prs/{str(c).replace('#', '/')}")).text
        assert f'<a href="/prs/{REPO}/{na}">{a}</a> → <a href="/prs/{REPO}/{nb}">{b}</a> → <strong>{c}</strong>' in page
        assert f"stack #{na} → #{nb} → [#{nc}]" in (await h.http.get("/?scope=all")).text


async def test_a_child_whose_rebase_conflicts_gets_a_conflict_round_and_lands(tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url) as h:
        (a, na), (b, nb) = await _open_stack(h, ("a", "b"), enroll=False)
        h.sim.set_reviewer(REPO, steps(0), number=na)
        # main takes its own app/b.py while the stack is open: B's first commit no longer
        # replays onto main, and B's branch conflicts with it once based on it.
        await h.sim.push(REPO, "main", {"app/b.py": "B = 'main'\n"}, author="dev")
        # Both enrolled through the API, from the top.
        answer = await h.http.post("/api/prs", json={"pr": str(b), "stack": True},
                                   headers={"authorization": "Bearer api-token"})
        assert answer.status_code == 201, answer.text
        assert (await h.view(a)) is not None
        await h.wait_status(a, "merged", timeout=120)
        view = await h.wait_status(b, "merged", timeout=180)
        await quiesce(h)

        assert [m["number"] for m in h.sim.effects("merge")] == [na, nb]
        assert h.sim.pr(REPO, nb)[1].base_ref == "main"
        assert _forced(h) == []  # the re-base did not replay: nothing was pushed over B's head
        rounds = await h.rounds(b)
        assert "conflict" in [r.kind for r in rounds], [(r.kind, r.status) for r in rounds]
        conflict = next(r for r in rounds if r.kind == "conflict")
        assert "app/b.py" in (conflict.instructions or "") + str(conflict.findings)
        assert rounds[-1].status == "converged" and rounds[-1].entry_head == view.pr.converged_head
        assert h.sim.duplicate_effects() == []
        assert await h.escalations(b) == []


async def test_a_parent_merged_by_hand_and_its_branch_deleted_leaves_githubs_retarget_and_the_child_lands(
        tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url) as h:
        (a, na), (b, nb) = await _open_stack(h, ("a", "b"), enroll=False)
        await h.sim.comment(REPO, nb, "/converge", user="maint")  # the parent is not enrolled

        async def waiting_for_a():
            v = await h.view(b)
            return v is not None and v.pr.status == "waiting_deps" and v.pr.last_action == f"waiting for {a}"

        await h.wait_for("B to wait for its parent", waiting_for_a, timeout=120)
        assert h.sim.effects("merge") == []  # never merged into its parent's branch
        converged = (await h.view(b)).pr.converged_head
        await h.sim.merge_pr(REPO, na, method="squash", actor="maint")
        await h.sim.delete_branch(REPO, "stack-a", actor="maint")  # GitHub retargets B to main
        assert h.sim.pr(REPO, nb)[1].base_ref == "main"
        view = await h.wait_status(b, "merged", timeout=180)
        await quiesce(h)

        assert h.sim.effects("pr_edited") == []  # GitHub's retarget stood: the bot made none
        (push,) = _forced(h)
        assert push["ref"] == "refs/heads/stack-b" and push["old"] == converged
        assert view.pr.converged_head == push["new"] == h.sim.effects("merge")[-1]["expected_head"]
        assert len(await _own_commits(h, push["new"])) == 2
        assert h.sim.duplicate_effects() == []


async def test_a_parent_merged_by_hand_keeping_its_branch_moves_its_child_at_once_and_the_bot_retargets_it(
        tmp_path, db_url):
    # No poll after the first: only the parent's merge, seen by its own step, moves the child.
    async with bot_on_simulator(tmp_path, db_url, poller={"interval_seconds": 3600}) as h:
        (a, na), (b, nb) = await _open_stack(h, ("a", "b"), enroll=False)
        await h.sim.comment(REPO, na, "/converge start --no-merge", user="maint")
        await h.sim.comment(REPO, nb, "/converge", user="maint")
        await h.wait_status(a, "converged", timeout=120)

        async def waiting_for_a():
            v = await h.view(b)
            return v is not None and v.pr.status == "waiting_deps" and v.pr.last_action == f"waiting for {a}"

        await h.wait_for("B to wait for its parent", waiting_for_a, timeout=120)
        await h.sim.merge_pr(REPO, na, method="rebase", actor="maint")  # by hand; its branch stays
        await h.wait_status(b, "merged", timeout=120)
        await quiesce(h)

        (retarget,) = h.sim.effects("pr_edited")
        assert retarget["number"] == nb and retarget["fields"] == ["base"]
        assert h.sim.pr(REPO, nb)[1].base_ref == "main"
        (push,) = _forced(h)
        assert push["ref"] == "refs/heads/stack-b"
        assert len(await _own_commits(h, push["new"])) == 2
        assert h.sim.duplicate_effects() == []


async def test_a_child_moved_off_its_parents_branch_before_the_parent_landed_no_longer_waits_for_it(
        tmp_path, db_url):
    async with bot_on_simulator(tmp_path, db_url) as h:
        (a, na), (b, nb) = await _open_stack(h, ("a", "b"), enroll=False)
        await h.sim.comment(REPO, nb, "/converge", user="maint")

        async def waiting_for_a():
            v = await h.view(b)
            return v is not None and v.pr.status == "waiting_deps" and v.pr.last_action == f"waiting for {a}"

        await h.wait_for("B to wait for its parent", waiting_for_a, timeout=120)
        await h.sim.edit_pr(REPO, nb, actor="dev", base="main")  # its author takes it off the stack
        await h.wait_status(b, "merged", timeout=45)
        assert h.sim.pr(REPO, na)[1].state == "open"  # its former parent still open, not waited for
        assert (await h.http.get(f"/api/prs/{str(b).replace('#', '/')}")).json()["stack"] == []


async def test_a_child_moved_off_its_parents_branch_and_back_is_stacked_on_it_again(tmp_path, db_url):
    # Merges wait for `/converge merge`: the child, off the stack, waits there, not merged.
    async with bot_on_simulator(tmp_path, db_url, merge={"require_approval": True}) as h:
        (a, na), (b, nb) = await _open_stack(h, ("a", "b"), enroll=False)
        await h.sim.comment(REPO, nb, "/converge", user="maint")

        async def stack_of_b() -> list[str] | None:
            return (await h.http.get(f"/api/prs/{str(b).replace('#', '/')}")).json().get("stack")

        async def waiting_for_a():
            v = await h.view(b)
            return v is not None and v.pr.status == "waiting_deps" and v.pr.last_action == f"waiting for {a}"

        await h.wait_for("B to wait for its parent", waiting_for_a, timeout=120)
        await h.sim.edit_pr(REPO, nb, actor="dev", base="main")
        await h.wait_status(b, "waiting_merge", timeout=60)  # off the stack: waits only for the approval
        assert await stack_of_b() == []
        await h.sim.edit_pr(REPO, nb, actor="dev", base="stack-a")  # and back onto its parent

        async def stacked_again():
            return await stack_of_b() == [str(a), str(b)]

        await h.wait_for("B stacked on A again", stacked_again, timeout=60)
        assert h.sim.effects("merge") == []
