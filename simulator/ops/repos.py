"""Repositories, collaborators, and branch moves (pushes, from the control API or real git)."""

from __future__ import annotations

from ..core import SimulatorCore
from ..errors import Unprocessable
from ..events import push_fields
from ..gitstore import ZERO_SHA, CommitInfo
from ..ids import iso, now
from ..state import ROLES, Repo


class RepoOps(SimulatorCore):
    async def create_repo(self, full_name: str, *, default_branch: str = "main",
                          files: dict[str, str] | None = None,
                          collaborators: dict[str, str] | None = None,
                          description: str | None = None, private: bool = False) -> Repo:
        """A repository whose default branch has one commit holding `files` (a README if none).
        `private`: only its own installation's token reads it (a public one, any's)."""
        owner, _, name = full_name.partition("/")
        if not owner or not name or "/" in name:
            raise Unprocessable(f"repository name must be owner/name, got {full_name!r}", "name")
        for role in (collaborators or {}).values():
            self._check_role(role)
        async with self.lock:
            if full_name.lower() in self.state.repos:
                raise Unprocessable("name already exists on this account", "name")
            git_dir = await self.git.init(full_name, default_branch)
            await self.git.commit_files(git_dir, default_branch,
                                        files or {"README.md": f"# {name}\n"},
                                        message="Initial commit", author=self.author(owner))
            repo = Repo(owner=owner, name=name, id=self.state.new_id(),
                        default_branch=default_branch, git_dir=git_dir, created_at=now(),
                        collaborators=dict(collaborators or {}), description=description,
                        private=private)
            self.state.add_repo(repo)
        return repo

    async def fork_repo(self, source: str, owner: str) -> Repo:
        """`owner`'s fork of `source` (same name, every branch of it), for PRs from a fork."""
        parent = self.repo(source)
        full_name = f"{owner}/{parent.name}"
        async with self.lock:
            if full_name.lower() in self.state.repos:
                raise Unprocessable("name already exists on this account", "name")
            git_dir = await self.git.fork(parent.git_dir, full_name, parent.default_branch)
            repo = Repo(owner=owner, name=parent.name, id=self.state.new_id(),
                        default_branch=parent.default_branch, git_dir=git_dir, created_at=now(),
                        description=parent.description, fork_of=parent.full_name)
            self.state.add_repo(repo)
        return repo

    @staticmethod
    def _check_role(role: str) -> None:
        if role not in ROLES:
            raise Unprocessable(f"permission must be one of {', '.join(ROLES)}, got {role!r}",
                                "permission")

    async def set_permission(self, repo_name: str, login: str, role: str | None) -> None:
        """Make `login` a collaborator with `role`, or remove them with None."""
        repo = self.repo(repo_name)
        if role is None:
            repo.collaborators = {k: v for k, v in repo.collaborators.items()
                                  if k.lower() != login.lower()}
            return
        self._check_role(role)
        repo.collaborators[login] = role

    async def require_up_to_date(self, repo_name: str, on: bool = True) -> None:
        """Branch protection's "require branches to be up to date before merging": while on,
        a PR whose base has commits its head lacks reads `behind` and is not merged (GitHub
        reports `behind` only then). Off by default. GitHub sends no webhook for this."""
        self.repo(repo_name).require_up_to_date = on

    def set_required_checks(self, repo_name: str, names: list[str]) -> None:
        """Branch protection's required status checks: until each has succeeded on a PR's head
        the PR reads `blocked` and is not merged; another failing check reads `unstable`.
        GitHub sends no webhook for this."""
        self.repo(repo_name).required_checks = list(names)

    def set_required_reviews(self, repo_name: str, count: int) -> None:
        """Branch protection's required approving reviews (`required_approving_review_count`,
        0 to 6 as on GitHub; 0 turns it off): until `count` users with write access approved
        a PR, and while one of them asks for changes, it reads `blocked` (its GraphQL
        `reviewDecision` REVIEW_REQUIRED or CHANGES_REQUESTED) and is not merged. GitHub sends
        no webhook for this."""
        if not 0 <= count <= 6:
            raise ValueError(f"required approving reviews: 0 to 6, not {count}")
        self.repo(repo_name).required_approving_reviews = count

    async def push(self, repo_name: str, branch: str, files: dict[str, str | None], *,
                   message: str = "Update files", author: str | None = None,
                   start: str | None = None) -> str:
        """Commit `files` onto `branch` (created from `start` or the default branch) with real
        git, then send the same webhooks a real push would. Returns the new sha."""
        repo = self.repo(repo_name)
        pusher = author or repo.owner
        async with self.lock:
            old, new = await self.git.commit_files(
                repo.git_dir, branch, files, message=message, author=self.author(pusher),
                start=start or repo.default_branch)
            await self._ref_moved(repo, f"refs/heads/{branch}", old, new, pusher)
        return new

    async def refs_pushed(self, repo_name: str, updates: list[tuple[str, str, str]],
                          pusher: str | None = None) -> None:
        """Called by the post-receive hook after a real `git push` moved `updates` (old, new, ref)."""
        repo = self.repo(repo_name)
        self.git.invalidate(repo.git_dir)  # before waiting for the lock: the refs already moved
        async with self.lock:
            for old, new, ref in updates:
                await self._ref_moved(repo, ref, old, new, pusher, via="git")

    async def _ref_moved(self, repo: Repo, ref: str, old: str, new: str,
                         pusher: str | None, via: str = "control") -> None:
        """Send push (and synchronize for open PRs on the branch); `via` names who moved it:
        control (the Python/control API), git (a real push), merge or update_branch.

        A branch of a fork heads PRs of its parent: their `synchronize` comes from the parent."""
        if not ref.startswith("refs/heads/") or old == new:
            return
        branch = ref.removeprefix("refs/heads/")
        prs = [pr for pr in self.state.prs_headed_in(repo)
               if pr.state == "open" and pr.head_ref == branch and pr.last_head != new]
        sender = pusher or (prs[0].user if prs else repo.owner)
        await self._emit_push(repo, ref, old, new, sender, via)
        if new == ZERO_SHA:
            return
        for pr in prs:
            base = self.repo(pr.repo)
            before, pr.last_head, pr.updated_at = pr.last_head, new, now()
            await self.emit_pr("synchronize", base, pr, pusher or pr.user, before=before,
                               after=new)
            self.reviewer.head_moved(base, pr)
            await self.queue_head_moved(base, pr)

    async def _emit_push(self, repo: Repo, ref: str, old: str, new: str, pusher: str,
                         via: str = "control") -> None:
        commits: list[CommitInfo] = []
        files: dict[str, dict[str, list[str]]] = {}
        forced = False
        if new != ZERO_SHA:
            since = old
            if old == ZERO_SHA and ref != f"refs/heads/{repo.default_branch}":
                since = await self.git.branch_sha(repo.git_dir, repo.default_branch) or ZERO_SHA
            commits, files = await self.git.pushed_commits(repo.git_dir, since, new)
            forced = old != ZERO_SHA and not await self.git.is_ancestor(repo.git_dir, old, new)
        # The same one merge-base call decides the webhook's `forced` and this record.
        self.ref_updates.append({"kind": "ref_update", "repo": repo.full_name, "ref": ref,
                                 "old": old, "new": new, "forced": forced,
                                 "created": old == ZERO_SHA, "deleted": new == ZERO_SHA,
                                 "pusher": pusher, "via": via, "at": iso(now())})
        self.emit("push", repo, pusher, **push_fields(
            self.ctx, repo, ref=ref, before=old, after=new, commits=commits, forced=forced,
            pusher=pusher, files=files))
