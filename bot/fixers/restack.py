"""Re-basing a stacked PR's own commits onto its new base (docs/stacks.md).

After the PR it was stacked on lands, the child's branch still carries the parent's commits as
they were before the landing (a squash or rebase merge puts other commits on the base). This
replays only the child's own commits: a scratch clone of the child's branch at the head the bot
read, `git rebase --onto <base> <fork point>`, and a push leased on that head, so a commit
someone pushed meanwhile is never overwritten. The bot's own git: no fixer runs in this clone.
"""

from __future__ import annotations

import asyncio
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bot.fixers.environment import GitIdentity, check_clone_url, git_env, secret_forms
from bot.fixers.git import Git, GitError, check_branch
from bot.fixers.gitdir import SAFE_CONFIG
from bot.fixers.workspace import lease_refused, remove_tree

_SHA = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True)
class Restack:
    clone_url: str
    token: str | None
    branch: str  # the child's head branch
    head: str  # the head the bot read: where the clone starts, and the push's lease
    base: str  # the branch its commits go onto
    # Where the child's own commits may begin, best first: the first one in the child's history
    # is taken (a commit of the parent's, or the point where the child left the parent's line).
    fork_points: tuple[str, ...]


@dataclass(frozen=True)
class Replayed:
    # pushed | nothing (no commit of the parent's to leave behind) | conflict | rejected (the
    # branch moved since the bot read it)
    outcome: str
    head: str | None = None
    files: tuple[str, ...] = ()
    fork_point: str | None = None


async def replay(req: Restack, *, identity: GitIdentity, git_timeout: float,
                 workdir_root: Path | None = None) -> Replayed:
    """Replay the child's own commits onto `req.base` and push them; raises GitError."""
    _check(req)
    if workdir_root is not None:
        workdir_root.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="convergebot-restack-", dir=workdir_root))
    secrets = secret_forms(req.token)
    remote = Git(git_env(identity, req.clone_url, req.token), git_timeout, secrets)
    local = Git(git_env(identity, req.clone_url, None), git_timeout, secrets)
    repo = root / "repo"
    try:
        await check_branch(local, req.branch, root)
        await check_branch(local, req.base, root, "base branch name")
        await remote.run("clone", "--quiet", "--no-tags", "--single-branch", f"--branch={req.branch}",
                         "--", req.clone_url, str(repo), cwd=root)
        if await local.run("rev-parse", "HEAD", cwd=repo) != req.head:
            # The branch moved since the bot read it: work on what it read; the lease refuses.
            await remote.run("fetch", "--quiet", "--no-tags", "origin", req.head, cwd=repo)
            await local.run("checkout", "--quiet", "-B", req.branch, req.head, cwd=repo)
        base = f"refs/remotes/origin/{req.base}"
        await remote.run("fetch", "--quiet", "--no-tags", "origin", f"+refs/heads/{req.base}:{base}", cwd=repo)
        fork = await _fork_point(local, repo, req.fork_points)
        if fork is None or (await local.call("merge-base", "--is-ancestor", fork, base, cwd=repo)).ok:
            # Nothing of the parent's to leave behind: it landed as its own commits (a merge
            # commit), or the child's history shows no commit of it.
            return Replayed("nothing", fork_point=fork)
        rebased = await local.call(*SAFE_CONFIG, "rebase", "--quiet", "--onto", base, fork, cwd=repo)
        if not rebased.ok:
            files = await local.call("diff", "--name-only", "-z", "--diff-filter=U", cwd=repo)
            await local.call(*SAFE_CONFIG, "rebase", "--abort", cwd=repo)
            return Replayed("conflict", files=tuple(sorted(p for p in files.stdout.split("\0") if p)),
                            fork_point=fork)
        new = await local.run("rev-parse", "HEAD", cwd=repo)
        if new == req.head:
            return Replayed("nothing", fork_point=fork)
        pushed = await remote.call(*SAFE_CONFIG, "push", "--porcelain", "--no-verify",
                                   f"--force-with-lease=refs/heads/{req.branch}:{req.head}",
                                   "--", req.clone_url, f"{new}:refs/heads/{req.branch}", cwd=repo)
        if pushed.ok:
            return Replayed("pushed", head=new, fork_point=fork)
        if lease_refused(pushed.stdout):
            return Replayed("rejected", fork_point=fork)
        raise GitError(remote.failure("push", pushed))
    finally:
        await asyncio.to_thread(remove_tree, root)


async def _fork_point(local: Git, repo: Path, candidates: tuple[str, ...]) -> str | None:
    for sha in candidates:
        if not _SHA.fullmatch(sha):
            continue
        if (await local.call("merge-base", "--is-ancestor", sha, "HEAD", cwd=repo)).ok:
            return sha
    return None


def _check(req: Restack) -> None:
    try:
        check_clone_url(req.clone_url)
    except ValueError as e:
        raise GitError(str(e)) from None
    if not _SHA.fullmatch(req.head):
        raise GitError("the head is not a full commit sha")
    for branch in (req.branch, req.base):  # git's own rule is `check_branch`, in `replay`
        if not branch or branch.startswith("-"):
            raise GitError(f"refusing branch name {branch!r}")
