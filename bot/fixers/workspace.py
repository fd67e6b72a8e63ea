"""A fixer's workspace: a fresh clone of the head branch at the entry head, published under a lease.

A conflict round's clone also holds the PR's base branch as `refs/remotes/origin/<base>`,
fetched by the bot into the fresh clone before the fixer starts (the fixer has no token to
fetch it with), so the fixer can merge it in.

Layout of the temporary directory (removed when the context exits):
    repo/           the clone the fixer works in
    prompt.md       the prompt, outside the work tree so it is never committed
    findings.json   the findings, likewise
    publish.git     a bare copy of the clone made before the fixer starts; the push runs here
    out/            made after the fixer exited: the bundle of its commits is written here
    fixed.bundle    that bundle, copied out by the bot and fetched into publish.git

After the fixer exited, the clone is the fixer's: the bot takes its git directory back
(bot/fixers/gitdir.py), then commits, reads HEAD and bundles the new commits with a token-free
git run inside the fixer's sandbox when there is one. Outside the sandbox, the bot's git then
reads only publish.git and the bundle, never the clone.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
import shutil
import stat
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path

from bot.fixers.base import FixRequest, Verdict
from bot.fixers.environment import GitIdentity, check_clone_url, git_env, secret_forms
from bot.fixers.git import Git, GitError, check_branch
from bot.fixers.gitdir import SAFE_CONFIG, copy_regular_file, reclaim, saved_config
from bot.fixers.sandbox import Sandbox

_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_FIXED_REF = "refs/convergebot/fixed"


_WHAT = {"review": "address review", "conflict": "resolve conflicts with the base branch",
         "ci": "fix failing checks"}


def commit_message(req: FixRequest) -> str:
    return f"convergebot: {_WHAT.get(req.kind, _WHAT['review'])} (round {req.round_no})"


def base_to_fetch(req: FixRequest) -> str | None:
    """The base branch a round brings in (a conflict round's, when named), else None."""
    return req.base_branch if req.kind == "conflict" and req.base_branch else None


@dataclass(frozen=True)
class Publication:
    """What became of the work after the fixer exited."""

    pushed_head: str | None = None
    rejected: bool = False  # the lease failed: the branch is no longer at the entry head
    withheld: str | None = None  # why nothing was pushed: the run or attempt moved on meanwhile

    def apply(self, verdict: Verdict) -> Verdict:
        if self.withheld:
            # The work belongs to a run or attempt that no longer owns the round: nothing is
            # answered "fixed", and were the verdict ever recorded it would read as a husk.
            kept = tuple(a for a in verdict.thread_actions if a.action != "fixed")
            return replace(verdict, thread_actions=kept, pushed_head=None, finished=False,
                           withheld=True, detail=self.withheld)
        if not self.rejected:
            return replace(verdict, pushed_head=self.pushed_head)
        # The fix never reached the branch, so no thread may be answered "fixed".
        kept = tuple(a for a in verdict.thread_actions if a.action != "fixed")
        return replace(
            verdict,
            thread_actions=kept,
            pushed_head=None,
            push_rejected=True,
            detail=verdict.detail or "push rejected: the branch moved since the round began",
        )


class Workspace:
    def __init__(self, root: Path, req: FixRequest, identity: GitIdentity, git_timeout: float,
                 sandbox: Sandbox | None = None):
        self.root = root
        self.repo = root / "repo"
        self.publish_repo = root / "publish.git"
        self.outbox = root / "out"
        self.prompt_file = root / "prompt.md"
        self.findings_file = root / "findings.json"
        self.req = req
        self.identity = identity
        self.saved_config = b""
        secrets = secret_forms(req.token)
        # `remote` carries the token; it only ever runs in repositories the fixer never touched
        # (the fresh clone before the fixer starts, publish.git), so a hook or config the fixer
        # planted cannot read the token from git's environment.
        self.remote = Git(git_env(identity, req.clone_url, req.token), git_timeout, secrets)
        self.local = Git(git_env(identity, req.clone_url, None), git_timeout, secrets)
        # `after` is the only git that touches the clone once the fixer ran: the clone named
        # outright (no discovery of a `.git` file), no transport at all, and inside the sandbox
        # when there is one, so whatever the fixer planted that the bot missed runs as the fixer.
        after_env = git_env(identity, req.clone_url, None)
        after_env.update(GIT_DIR=str(self.repo / ".git"), GIT_WORK_TREE=str(self.repo),
                         GIT_ALLOW_PROTOCOL="")
        wrap = None
        if sandbox is not None:
            wrap = functools.partial(sandbox.wrap, repo=self.repo, inputs=(),
                                     workdir=root.parent, outputs=(self.outbox,))
        self.after = Git(after_env, git_timeout, secrets, wrap)

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls,
        req: FixRequest,
        *,
        identity: GitIdentity,
        git_timeout: float,
        workdir_root: Path | None = None,
        sandbox: Sandbox | None = None,
    ) -> AsyncIterator[Workspace]:
        """A clone of `req.head_branch` checked out at `req.entry_head`; raises GitError."""
        _check_request(req)
        if workdir_root is not None:
            workdir_root.mkdir(parents=True, exist_ok=True)
        root = Path(tempfile.mkdtemp(prefix="convergebot-fix-", dir=workdir_root))
        try:
            ws = cls(root, req, identity, git_timeout, sandbox)
            await ws._checkout()
            await ws._fetch_base()
            await ws._keep_a_copy()
            yield ws
        finally:
            await asyncio.to_thread(remove_tree, root)

    async def _checkout(self) -> None:
        branch, entry = self.req.head_branch, self.req.entry_head
        await check_branch(self.local, branch, self.root)
        await self.remote.run(
            "clone", "--quiet", "--no-tags", "--single-branch", f"--branch={branch}",
            "--", self.req.clone_url, str(self.repo), cwd=self.root,
        )
        if await self.head() == entry:
            return
        # The branch moved after the round began: work on what the round saw. The push lease
        # names the entry head, so the later push is refused rather than overwriting that move.
        if not (await self.local.call("cat-file", "-e", f"{entry}^{{commit}}", cwd=self.repo)).ok:
            await self.remote.run("fetch", "--quiet", "--no-tags", "origin", entry, cwd=self.repo)
        await self.local.run("checkout", "--quiet", "-B", branch, entry, cwd=self.repo)

    async def _fetch_base(self) -> None:
        """A conflict round's base branch into `refs/remotes/origin/<base>`. Still the bot's
        fresh clone: the fixer has not run, so the token-bearing git may fetch here."""
        base = base_to_fetch(self.req)
        if base is None:
            return
        await check_branch(self.local, base, self.root, "base branch name")
        # A fork's PR: the base branch of the base repository, not the fork's stale namesake.
        source = self.req.base_clone_url or "origin"
        await self.remote.run("fetch", "--quiet", "--no-tags", source,
                              f"+refs/heads/{base}:refs/remotes/origin/{base}", cwd=self.repo)

    async def _keep_a_copy(self) -> None:
        """Before the fixer starts: its clone's config, and a bare copy (no hardlinks, which the
        fixer could write through) that the push will run in."""
        self.saved_config = saved_config(self.repo)
        await self.local.run(
            *SAFE_CONFIG, "clone", "--quiet", "--bare", "--no-hardlinks", "--",
            str(self.repo), str(self.publish_repo), cwd=self.root,
        )

    def write_inputs(self, prompt: str, findings: str) -> None:
        self.prompt_file.write_text(prompt, encoding="utf-8")
        self.findings_file.write_text(findings, encoding="utf-8")

    async def head(self) -> str:
        return await self.local.run("rev-parse", "--verify", "HEAD^{commit}", cwd=self.repo)

    async def commit_pending(self, message: str) -> bool:
        """Commit everything the fixer left uncommitted (untracked files too); True if it did.

        Only after `reclaim`: the fixer owns the clone's git directory until then."""
        status = await self.after.run(
            *SAFE_CONFIG, "status", "--porcelain", "--untracked-files=all",
            "--ignore-submodules=all", cwd=self.repo,
        )
        if not status:
            return False
        await self.after.run(*SAFE_CONFIG, "add", "--all", cwd=self.repo)
        await self.after.run(
            *SAFE_CONFIG, "commit", "--quiet", "--no-verify", "-m", message, cwd=self.repo
        )
        return True

    async def _take_commits(self) -> str | None:
        """The fixer's HEAD fetched into publish.git, or None when it is the entry head."""
        head = await self.after.run(*SAFE_CONFIG, "rev-parse", "--verify", "HEAD^{commit}",
                                    cwd=self.repo)
        if head == self.req.entry_head:
            return None
        bundle = self.outbox / "fixed.bundle"
        await self.after.run(*SAFE_CONFIG, "bundle", "create", str(bundle), "HEAD",
                             f"^{self.req.entry_head}", cwd=self.repo)
        # Written by git that read the fixer's files: copied, never followed, before git reads it.
        taken = self.root / "fixed.bundle"
        await asyncio.to_thread(copy_regular_file, bundle, taken)
        await self.local.run(*SAFE_CONFIG, "fetch", "--quiet", "--no-tags", str(taken),
                             f"+HEAD:{_FIXED_REF}", cwd=self.publish_repo)
        fixed = await self.local.run("rev-parse", "--verify", f"{_FIXED_REF}^{{commit}}",
                                     cwd=self.publish_repo)
        return None if fixed == self.req.entry_head else fixed

    async def publish(self, message: str) -> Publication:
        """Commit leftovers, then push HEAD to the branch if it moved, leased on the entry head,
        unless the request's run or attempt no longer owns the round (`FixRequest.still_current`).

        `--force-with-lease=<branch>:<entry_head>` lets the push replace the entry head (a fixer
        may rebase) and nothing else: a commit someone pushed meanwhile is never overwritten.
        """
        self.outbox.mkdir()
        await asyncio.to_thread(reclaim, self.repo, self.saved_config)
        await self.commit_pending(message)
        head = await self._take_commits()
        if head is None:
            return Publication()
        publish = self.publish_repo
        branch = self.req.head_branch
        # Asked last, right before the push: a run stopped, superseded or rerun while the fixer
        # worked must not push, and the heartbeat that cancels its job may be a third of a lease
        # away. The lease below still guards the branch against anyone else's push.
        withheld = await _withheld(self.req)
        if withheld:
            return Publication(withheld=withheld)
        if self.req.pushing is not None:
            self.req.pushing(head)
        result = await self.remote.call(
            *SAFE_CONFIG, "push", "--porcelain", "--no-verify",
            f"--force-with-lease=refs/heads/{branch}:{self.req.entry_head}",
            "--", self.req.clone_url, f"{head}:refs/heads/{branch}", cwd=publish,
        )
        if result.ok:
            return Publication(pushed_head=head)
        if not lease_refused(result.stdout):
            raise GitError(self.remote.failure("push", result))
        if await self._remote_head(publish) == head:
            return Publication(pushed_head=head)  # the fixer pushed this very commit itself
        return Publication(rejected=True)

    async def _remote_head(self, cwd: Path) -> str | None:
        ref = f"refs/heads/{self.req.head_branch}"
        result = await self.remote.call("ls-remote", "--", self.req.clone_url, ref, cwd=cwd)
        words = result.stdout.split() if result.ok else []
        return words[0] if words else None


async def _withheld(req: FixRequest) -> str | None:
    """Why the push must not happen (the request's run or attempt moved on), else None.

    An answer that cannot be read is a no: a push for a run nobody drives is the worse mistake.
    """
    if req.still_current is None:
        return None
    try:
        if await req.still_current():
            return None
    except Exception as e:
        return f"not pushed: could not confirm the run still owns the round ({type(e).__name__})"
    return "not pushed: the run was stopped or the round moved on while the fixer worked"


def lease_refused(porcelain: str) -> bool:
    """`!<TAB>src:dst<TAB>[rejected] (stale info)` and kin: the remote ref was not what we leased.

    A `[remote rejected]` line (a protected branch, a declined hook) is a failure, not a lease.
    """
    return any(
        line.startswith("!") and "\t[rejected]" in line for line in porcelain.splitlines()
    )


def _check_request(req: FixRequest) -> None:
    try:
        check_clone_url(req.clone_url)
        if req.base_clone_url is not None:
            check_clone_url(req.base_clone_url)
    except ValueError as e:
        raise GitError(str(e)) from None
    if not _SHA.fullmatch(req.entry_head):
        raise GitError("entry head is not a full commit sha")
    if not req.head_branch or req.head_branch.startswith("-"):
        raise GitError(f"refusing branch name {req.head_branch!r}")
    base = base_to_fetch(req)
    if base is not None and base.startswith("-"):
        raise GitError(f"refusing base branch name {base!r}")


def remove_tree(root: Path) -> None:
    """Delete a workspace, even where the fixer left unwritable directories behind."""
    try:
        shutil.rmtree(root)
        return
    except FileNotFoundError:
        return
    except OSError:
        pass
    for dirpath, dirnames, _ in os.walk(root):
        for path in (dirpath, *(os.path.join(dirpath, d) for d in dirnames)):
            if not os.path.islink(path):  # chmod follows links: never touch what lies outside
                with contextlib.suppress(OSError):
                    os.chmod(path, stat.S_IRWXU)
    shutil.rmtree(root, ignore_errors=True)
