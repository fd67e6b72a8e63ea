"""The simulator's ref cache: repeated reads run no git, and every way a ref moves is seen by the
very next read (API merge, update-branch, `sim.push`, a real `git push` through the hook, a push
whose hook never reported, a force push, a branch deletion, packed refs)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from simulator.gitstore import Author, GitStore
from simulator.refcache import RefCache, plain_refname

from ..simulator_fixtures import git, start_simulator

REPO = "acme/widgets"
PULLS = f"repos/{REPO}/pulls"


@pytest.fixture
async def pr(sim):
    await sim.create_repo(REPO, files={"app.py": "one\ntwo\nthree\n"})
    return await sim.open_pr(REPO, title="Change two", head="fix", author="alice",
                             files={"app.py": "one\nTWO\nthree\n"})


async def _ref(api, branch: str) -> str | None:
    resp = await api.get(f"repos/{REPO}/git/ref/heads/{branch}")
    if resp.status_code == 404:
        return None
    assert resp.status_code == 200, resp.text
    return resp.json()["object"]["sha"]


async def _pull_head(api, number: int) -> str:
    return (await api.get(f"{PULLS}/{number}")).json()["head"]["sha"]


async def _warm(api, number: int, *branches: str) -> None:
    """Read everything once, so the next reads would come from the cache if it were stale."""
    for _ in range(2):
        await api.get(f"{PULLS}/{number}")
        await api.get(PULLS)
        for branch in branches:
            await _ref(api, branch)


async def _clone(sim, tmp_path: Path, branch: str, name: str = "work") -> Path:
    work = tmp_path / name
    await git("clone", "--quiet", "--branch", branch, sim.repo(REPO).git_dir.as_uri(), str(work))
    return work


async def _commit(work: Path, text: str) -> str:
    (work / "app.py").write_text(text)
    await git("commit", "--quiet", "-am", text.strip()[:20] or "empty", cwd=work)
    return (await git("rev-parse", "HEAD", cwd=work)).strip()


# -- repeated reads cost no git -------------------------------------------------------------


async def test_repeated_reads_run_no_git(api, sim, pr):
    head = await _ref(api, "fix")
    await sim.set_check_run(REPO, head, "ci")
    await sim.set_status(REPO, head, "success", context="lint")
    hot = [f"{PULLS}/{pr.number}", PULLS, f"repos/{REPO}/git/ref/heads/fix",
           f"repos/{REPO}/git/ref/heads/main", f"repos/{REPO}/commits/{head}/check-runs",
           f"repos/{REPO}/commits/{head}/status", f"repos/{REPO}/commits/fix/check-runs"]
    for path in hot:  # first reads: one snapshot, the PR's diff counts, the sha's commit
        assert (await api.get(path)).status_code == 200, path
    before = sim.git.calls.total()

    for _ in range(20):
        assert (await api.get(f"{PULLS}/{pr.number}")).json()["head"]["sha"] == head
    assert sim.git.calls.total() == before, "20 GET /pulls/{n} ran git"

    for _ in range(5):
        for path in hot:
            assert (await api.get(path)).status_code == 200, path
    assert sim.git.calls.total() == before, dict(sim.git.calls)
    assert sim.git.ref_cache.hits > 0


async def test_without_the_cache_every_read_runs_git(tmp_path):
    server = await start_simulator(tmp_path / "github", cache_heads=False)
    try:
        sim = server.sim
        await sim.create_repo(REPO)
        pr = await sim.open_pr(REPO, title="t", head="fix", author="alice", files={"a": "1\n"})
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as api:
            await api.get(f"{PULLS}/{pr.number}")
            before = sim.git.calls["for-each-ref"]
            for _ in range(5):
                await api.get(f"{PULLS}/{pr.number}")
            assert sim.git.calls["for-each-ref"] == before + 5
            assert sim.git.ref_cache.hits == 0
    finally:
        await server.stop()


async def test_the_switch_can_be_flipped_at_runtime(api, sim, pr):
    await _warm(api, pr.number, "fix")
    sim.git.cache_heads = False
    before = sim.git.calls.total()
    await _pull_head(api, pr.number)
    assert sim.git.calls.total() > before
    sim.git.cache_heads = True
    pushed = await sim.push(REPO, "fix", {"b.py": "b\n"}, author="alice")
    assert await _pull_head(api, pr.number) == pushed == await _ref(api, "fix")


# -- every kind of ref move is seen by the next read ------------------------------------------


async def test_control_push_is_seen_at_once(api, sim, pr):
    await _warm(api, pr.number, "fix")
    for i in range(3):
        pushed = await sim.push(REPO, "fix", {"n.txt": f"{i}\n"}, author="alice")
        assert await _ref(api, "fix") == pushed
        assert await _pull_head(api, pr.number) == pushed
        [listed] = (await api.get(PULLS)).json()
        assert listed["head"]["sha"] == pushed


async def test_new_branch_from_control_push_is_seen(api, sim, pr):
    await _warm(api, pr.number, "fix", "other")
    assert await _ref(api, "other") is None
    pushed = await sim.push(REPO, "other", {"o.txt": "o\n"}, author="alice")
    assert await _ref(api, "other") == pushed


async def test_api_merge_moves_base_and_the_next_read_sees_it(api, sim, pr):
    await _warm(api, pr.number, "fix", "main")
    base_before = await _ref(api, "main")
    head = await _ref(api, "fix")
    resp = await api.put(f"{PULLS}/{pr.number}/merge", json={"sha": head, "merge_method": "merge"})
    assert resp.status_code == 200, resp.text
    merged = resp.json()["sha"]
    assert await _ref(api, "main") == merged != base_before
    pull = (await api.get(f"{PULLS}/{pr.number}")).json()
    assert pull["merged"] and pull["head"]["sha"] == head and pull["base"]["sha"] == base_before
    status = await api.get(f"repos/{REPO}/commits/main/status")
    assert status.json()["sha"] == merged


async def test_update_branch_is_seen_at_once(api, sim, pr):
    await sim.push(REPO, "main", {"base.txt": "new on main\n"}, author="bob")
    await _warm(api, pr.number, "fix", "main")
    before = await _ref(api, "fix")
    resp = await api.put(f"{PULLS}/{pr.number}/update-branch", json={})
    assert resp.status_code == 202, resp.text
    new = await _ref(api, "fix")
    assert new != before
    assert await _pull_head(api, pr.number) == new
    assert sim.ref_updates[-1]["via"] == "update_branch" and sim.ref_updates[-1]["new"] == new


async def test_real_git_push_through_the_hook_is_seen_at_once(api, sim, pr, tmp_path):
    await _warm(api, pr.number, "fix")
    work = await _clone(sim, tmp_path, "fix")
    for i in range(3):  # the fixer's pattern: push, then read the ref right away
        pushed = await _commit(work, f"one\nTWO {i}\nthree\n")
        await git("push", "--quiet", "origin", "fix", cwd=work, env={"SIMULATOR_PUSHER": "fixer"})
        assert await _ref(api, "fix") == pushed
        assert await _pull_head(api, pr.number) == pushed
    assert [u["via"] for u in sim.ref_updates[-3:]] == ["git"] * 3  # the hook did report


async def test_real_push_the_hook_never_reported_is_still_seen(api, sim, pr, tmp_path):
    # The post-receive notification is lost (no URL: as if the hook failed): the ref files on
    # disk changed, so the cache's stamp no longer matches and the next read goes to git.
    await _warm(api, pr.number, "fix")
    sim.git.set_hook_url(None)
    work = await _clone(sim, tmp_path, "fix")
    for i in range(3):
        pushed = await _commit(work, f"quiet {i}\n")
        await git("push", "--quiet", "origin", "fix", cwd=work)
        assert await _ref(api, "fix") == pushed
        assert await _pull_head(api, pr.number) == pushed
    assert sim.webhooks.find("pull_request", "synchronize") == []


async def test_force_push_is_seen_with_and_without_the_hook(api, sim, pr, tmp_path):
    await _warm(api, pr.number, "fix")
    work = await _clone(sim, tmp_path, "fix")
    original = await _ref(api, "fix")
    for hook in (True, False):
        sim.git.set_hook_url(sim.hook_endpoint if hook else None)
        await git("reset", "--quiet", "--hard", "HEAD~1", cwd=work)
        rewritten = await _commit(work, f"rewritten, hook={hook}\n")
        await git("push", "--quiet", "--force", "origin", "fix", cwd=work)
        assert await _ref(api, "fix") == rewritten != original
        assert await _pull_head(api, pr.number) == rewritten
    assert sim.forced_pushes() and sim.forced_pushes()[0]["new"] != original


@pytest.mark.parametrize("hook", [True, False])
async def test_branch_deletion_is_seen_at_once(api, sim, pr, tmp_path, hook):
    pushed = await sim.push(REPO, "doomed", {"d.txt": "d\n"}, author="alice")
    await _warm(api, pr.number, "fix", "doomed")
    assert await _ref(api, "doomed") == pushed
    if not hook:
        sim.git.set_hook_url(None)
    work = await _clone(sim, tmp_path, "fix")
    await git("push", "--quiet", "origin", "--delete", "doomed", cwd=work)
    assert await _ref(api, "doomed") is None
    assert "doomed" not in (await sim.dump_state())["repos"][0]["branches"]
    status = await api.get(f"repos/{REPO}/commits/doomed/status")
    assert status.status_code == 422  # the name no longer resolves
    if hook:
        assert sim.ref_updates[-1]["deleted"] and sim.ref_updates[-1]["via"] == "git"


async def test_packed_refs_and_direct_ref_updates_are_seen(api, sim, pr, tmp_path):
    # Moves git makes without any hook: packing the refs, then update-ref on a packed branch
    # (a new loose file), then deleting it (a rewrite of packed-refs).
    git_dir = str(sim.repo(REPO).git_dir)
    await _warm(api, pr.number, "fix", "main")
    main = await _ref(api, "main")
    fix = await _ref(api, "fix")
    await git("--git-dir", git_dir, "pack-refs", "--all", "--prune")
    assert not (Path(git_dir) / "refs" / "heads" / "fix").exists()
    assert await _ref(api, "fix") == fix
    await git("--git-dir", git_dir, "update-ref", "refs/heads/fix", main)
    assert await _ref(api, "fix") == main
    assert await _pull_head(api, pr.number) == main
    await git("--git-dir", git_dir, "pack-refs", "--all", "--prune")
    await git("--git-dir", git_dir, "update-ref", "-d", "refs/heads/fix")
    assert await _ref(api, "fix") is None


async def test_reads_racing_a_push_never_see_the_old_head_after_it(api, sim, pr):
    await _warm(api, pr.number, "fix")
    before = await _ref(api, "fix")
    stop = asyncio.Event()
    seen: set[str | None] = set()

    async def reader():
        while not stop.is_set():
            seen.add(await _ref(api, "fix"))

    readers = [asyncio.create_task(reader()) for _ in range(4)]
    try:
        pushed = await sim.push(REPO, "fix", {"race.txt": "r\n"}, author="alice")
        assert await _ref(api, "fix") == pushed
        assert await _pull_head(api, pr.number) == pushed
    finally:
        stop.set()
        await asyncio.gather(*readers)
    assert seen <= {before, pushed}


async def test_head_lag_still_lags_over_the_cache(api, sim, pr):
    await _warm(api, pr.number, "fix")
    before = await _ref(api, "fix")
    await sim.lag_pr_head(REPO, pr.number)
    pushed = await sim.push(REPO, "fix", {"l.txt": "l\n"}, author="alice")
    assert await _ref(api, "fix") == pushed
    assert await _pull_head(api, pr.number) == before  # the PR object lags on purpose
    sim.release_pr_head(REPO, pr.number)
    assert await _pull_head(api, pr.number) == pushed


# -- the cache's own rules ----------------------------------------------------------------------


async def test_a_snapshot_read_while_a_move_is_reported_is_not_kept(tmp_path):
    cache = RefCache()
    git_dir = tmp_path / "r.git"
    (git_dir / "refs" / "heads").mkdir(parents=True)
    reading, release = asyncio.Event(), asyncio.Event()
    loads = 0

    async def load():
        nonlocal loads
        loads += 1
        reading.set()
        await release.wait()
        return {"refs/heads/main": ("a" * 40, "commit", "", "")}

    task = asyncio.create_task(cache.snapshot(git_dir, load))
    await reading.wait()
    cache.invalidate(git_dir)  # the hook reports a move while git was reading
    release.set()
    await task
    await cache.snapshot(git_dir, load)
    assert loads == 2


async def test_resolve_and_branch_sha_agree_with_git(tmp_path):
    # The cached answers against the uncached ones, for names that look like branches, shas,
    # tags and revision syntax.
    cached, direct = GitStore(tmp_path), GitStore(tmp_path, cache_heads=False)
    git_dir = await cached.init("acme/r", "main")
    who = Author("a", "a@example.invalid")
    _, first = await cached.commit_files(git_dir, "main", {"a": "1\n"}, message="one", author=who)
    _, second = await cached.commit_files(git_dir, "main", {"a": "2\n"}, message="two", author=who)
    await cached.commit_files(git_dir, "feature/x", {"b": "1\n"}, message="x", author=who,
                              start="main")
    await git("--git-dir", str(git_dir), "tag", "v1", first)
    await git("--git-dir", str(git_dir), "tag", "-a", "-m", "annotated", "v2", second)
    await git("--git-dir", str(git_dir), "update-ref", f"refs/heads/{first}", second)  # sha-named
    names = ["main", "feature/x", "heads/main", "heads/feature/x", "tags/v1", "v1", "v2",
             "tags/v2", first, second, second[:12], "main~1", "HEAD", "nope", "heads/nope",
             "0" * 40, "feature", "refs/heads/main", "main^{tree}", "@"]
    for name in names:
        assert await cached.resolve(git_dir, name) == await direct.resolve(git_dir, name), name
        assert (await cached.branch_sha(git_dir, name)
                == await direct.branch_sha(git_dir, name)), name
    assert await cached.heads(git_dir) == await direct.heads(git_dir)
    calls = cached.calls.total()
    for name in ("main", "feature/x", first, second, "tags/v1"):
        await cached.resolve(git_dir, name)
    assert cached.calls.total() == calls


def test_plain_refnames():
    for ok in ("main", "feature/x", "heads/main", "a" * 40, "release-1.2", "v1_x+y"):
        assert plain_refname(ok), ok
    for bad in ("main~1", "main^", "a..b", "@", "x@{1}", "a:b", ".hidden", "a/.b", "x.lock",
                "x/", "a//b", "sp ace", ""):
        assert not plain_refname(bad), bad
