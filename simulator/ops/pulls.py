"""Pull request lifecycle: open, edit, labels, review requests, close, reopen, mergeability."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..core import SimulatorCore
from ..errors import ApiError, Unprocessable
from ..gitstore import ZERO_SHA
from ..ids import now
from ..shapes.pulls import label
from ..shapes.users import user
from ..state import COPILOT_LOGIN, MERGEABLE_STATES, PullRequest, Repo, ReviewerScript


class PullOps(SimulatorCore):
    async def open_pr(self, repo_name: str, *, title: str, head: str, base: str | None = None,
                      files: Mapping[str, str | None] | None = None, body: str | None = "",
                      author: str = "octocat", labels: Iterable[str] = (), draft: bool = False,
                      message: str | None = None,
                      reviewers: Iterable[ReviewerScript] = (), head_repo: str | None = None,
                      maintainer_can_modify: bool = False) -> PullRequest:
        """Open a PR from `head`, first committing `files` onto it (the branch is created from
        `base` if missing), exactly as a contributor pushing and opening a PR would.

        `head_repo`: a fork of `repo_name` (`fork_repo`) whose branch `head` the PR is from;
        `maintainer_can_modify`: its author allows edits by maintainers."""
        repo = self.repo(repo_name)
        source = self.repo(head_repo) if head_repo else repo
        if source is not repo and source.fork_of != repo.full_name:
            raise Unprocessable(f"{source.full_name} is not a fork of {repo.full_name}", "head")
        base = base or repo.default_branch
        async with self.lock:
            base_sha = await self.git.branch_sha(repo.git_dir, base)
            if base_sha is None:
                raise Unprocessable(f"base branch {base!r} does not exist", "base")
            head_sha = await self.git.branch_sha(source.git_dir, head)
            if files:
                old, head_sha = await self.git.commit_files(
                    source.git_dir, head, files, message=message or title,
                    author=self.author(author), start=base_sha)
                await self._ref_moved(source, f"refs/heads/{head}", old, head_sha, author)
            if head_sha is None:
                raise Unprocessable(f"head branch {head!r} does not exist", "head")
            stamp = now()
            pr = PullRequest(repo=repo.full_name, number=repo.next_number, id=self.state.new_id(),
                             title=title, body=body, user=author, head_ref=head, base_ref=base,
                             created_at=stamp, updated_at=stamp, last_head=head_sha,
                             last_base=base_sha, draft=draft, reviewers=list(reviewers),
                             head_repo=source.full_name if source is not repo else None,
                             maintainer_can_modify=maintainer_can_modify)
            repo.next_number += 1
            self.state.add_pr(pr)
            await self.emit_pr("opened", repo, pr, author)
            await self._add_labels(repo, pr, labels, author)
            self.reviewer.head_moved(repo, pr)
        return pr

    async def edit_pr(self, repo_name: str, number: int, *, actor: str, title: str | None = None,
                      body: str | None = None, state: str | None = None,
                      base: str | None = None) -> PullRequest:
        repo, pr = self.pr(repo_name, number)
        if state is not None and state not in ("open", "closed"):
            raise Unprocessable("state must be open or closed", "state")
        if base is not None and await self.git.branch_sha(repo.git_dir, base) is None:
            raise Unprocessable(f"Proposed base branch '{base}' was not found", "base")
        changes = {}
        async with self.lock:
            for name, value in (("title", title), ("body", body), ("base", base)):
                field = "base_ref" if name == "base" else name
                if value is not None and getattr(pr, field) != value:
                    old = getattr(pr, field)
                    changes[name] = {"ref": {"from": old}} if name == "base" else {"from": old}
                    setattr(pr, field, value)
            if changes:
                pr.updated_at = now()
                await self.emit_pr("edited", repo, pr, actor, changes=changes)
            if state == "closed" and pr.state == "open":
                await self._close(repo, pr, actor)
            elif state == "open" and pr.state == "closed":
                await self._reopen(repo, pr, actor)
        return pr

    async def delete_branch(self, repo_name: str, branch: str, *, actor: str | None = None) -> None:
        """DELETE .../git/refs/heads/{branch}, as GitHub does it: the open PRs based on the branch
        are retargeted to the base of the merged PR it headed (or closed when it headed none that
        merged), and the open PRs it heads are closed."""
        repo = self.repo(repo_name)
        async with self.lock:
            await self._delete_branch(repo, branch, actor or repo.owner)

    async def _delete_branch(self, repo: Repo, branch: str, actor: str) -> None:
        if branch == repo.default_branch:
            raise Unprocessable("Cannot delete the default branch", "ref")
        old = await self.git.branch_sha(repo.git_dir, branch)
        if old is None:
            raise Unprocessable("Reference does not exist", "ref")
        await self.git.delete_ref(repo.git_dir, branch, old)
        await self._ref_moved(repo, f"refs/heads/{branch}", old, ZERO_SHA, actor)
        landed = [pr for pr in self.state.prs_headed_in(repo) if pr.head_ref == branch and pr.merged_at]
        for pr in self.state.prs_of(repo):
            if pr.state != "open":
                continue
            if pr.base_ref == branch and landed:
                pr.base_ref = max(landed, key=lambda p: p.merged_at or now()).base_ref
                pr.updated_at = now()
                await self.emit_pr("edited", repo, pr, actor, changes={"base": {"ref": {"from": branch}}})
            elif pr.base_ref == branch or (pr.head_ref == branch and self.head_repo(repo, pr) is repo):
                await self._close(repo, pr, actor)

    async def close_pr(self, repo_name: str, number: int, *, actor: str | None = None) -> None:
        repo, pr = self.pr(repo_name, number)
        async with self.lock:
            if pr.state == "open":
                await self._close(repo, pr, actor or pr.user)

    async def reopen_pr(self, repo_name: str, number: int, *, actor: str | None = None) -> None:
        repo, pr = self.pr(repo_name, number)
        async with self.lock:
            if pr.merged:
                raise Unprocessable("a merged pull request cannot be reopened", "state")
            if pr.state == "closed":
                await self._reopen(repo, pr, actor or pr.user)

    async def _close(self, repo, pr: PullRequest, actor: str) -> None:
        heads = await self.heads(repo, pr)  # freeze what the PR closed with
        pr.last_head, pr.last_base = heads.head, heads.base
        pr.state, pr.closed_at, pr.updated_at = "closed", now(), now()
        await self.emit_pr("closed", repo, pr, actor)

    async def _reopen(self, repo, pr: PullRequest, actor: str) -> None:
        pr.state, pr.closed_at, pr.updated_at = "open", None, now()
        pr.last_head = await self.head_sha(repo, pr)
        await self.emit_pr("reopened", repo, pr, actor)

    async def set_mergeable(self, repo_name: str, number: int, state: str | None) -> None:
        """Force mergeable_state (None: back to computed). GitHub sends no webhook for this."""
        if state is not None and state not in MERGEABLE_STATES:
            raise Unprocessable(f"mergeable_state must be one of {', '.join(MERGEABLE_STATES)}",
                                "mergeable_state")
        _, pr = self.pr(repo_name, number)
        pr.mergeable_state = state

    async def add_labels(self, repo_name: str, number: int, labels: Iterable[str], *,
                         actor: str) -> list[str]:
        repo, pr = self.pr(repo_name, number)
        async with self.lock:
            await self._add_labels(repo, pr, labels, actor)
        return pr.labels

    async def _add_labels(self, repo, pr: PullRequest, labels: Iterable[str], actor: str) -> None:
        for name in labels:
            if name not in pr.labels:
                pr.labels.append(name)
                await self.emit_pr("labeled", repo, pr, actor, label=label(self.ctx, repo, name))

    async def remove_label(self, repo_name: str, number: int, name: str, *, actor: str) -> None:
        repo, pr = self.pr(repo_name, number)
        async with self.lock:
            if name not in pr.labels:
                raise ApiError(404, "Label does not exist")
            pr.labels.remove(name)
            await self.emit_pr("unlabeled", repo, pr, actor, label=label(self.ctx, repo, name))

    async def request_reviewers(self, repo_name: str, number: int, reviewers: Iterable[str], *,
                                actor: str) -> PullRequest:
        """Add pending review requests; a scripted reviewer starts reviewing the current head."""
        repo, pr = self.pr(repo_name, number)
        async with self.lock:
            for login in reviewers:
                if login.lower() == pr.user.lower():
                    raise Unprocessable("Review cannot be requested from pull request author.",
                                        "reviewers")
                if login not in pr.requested_reviewers:
                    pr.requested_reviewers.append(login)
                    await self.emit_pr("review_requested", repo, pr, actor,
                                       requested_reviewer=user(self.ctx, login))
                self.reviewer.requested(repo, pr, login)
        return pr

    async def remove_requested_reviewers(self, repo_name: str, number: int,
                                         reviewers: Iterable[str], *, actor: str) -> PullRequest:
        repo, pr = self.pr(repo_name, number)
        async with self.lock:
            for login in reviewers:
                if login in pr.requested_reviewers:
                    pr.requested_reviewers.remove(login)
                    self.reviewer.cancel(repo, pr, login)
                    await self.emit_pr("review_request_removed", repo, pr, actor,
                                       requested_reviewer=user(self.ctx, login))
        return pr

    async def request_copilot_review(self, repo_name: str, number: int, *, actor: str) -> None:
        """POST .../copilot-code-review: 409 while a Copilot review is already pending."""
        _, pr = self.pr(repo_name, number)
        if COPILOT_LOGIN in pr.requested_reviewers:
            raise ApiError(409, "A Copilot review is already in progress for this pull request.")
        await self.request_reviewers(repo_name, number, [COPILOT_LOGIN], actor=actor)

    def set_reviewer(self, repo_name: str, script: ReviewerScript,
                     number: int | None = None) -> None:
        """Give a PR (or, without `number`, every PR of the repo) a scripted reviewer."""
        if number is None:
            target = self.repo(repo_name).reviewers
        else:
            target = self.pr(repo_name, number)[1].reviewers
        target[:] = [s for s in target if s.login != script.login] + [script]
