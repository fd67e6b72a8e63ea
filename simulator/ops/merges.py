"""Merging a PR and updating its branch: real commits on real branches."""

from __future__ import annotations

from ..core import SimulatorCore
from ..errors import ApiError, Unprocessable
from ..gitstore import RefMoved
from ..ids import now
from .queue import REQUIRED_BY_QUEUE

MERGE_METHODS = ("merge", "squash", "rebase")

# Why GitHub refuses a merge (405), by mergeable_state.
_REFUSALS = {
    "dirty": "Pull Request is not mergeable",
    "blocked": "Pull Request is not mergeable: required status checks or reviews are missing",
    "behind": "Head branch is not up to date with the base branch",
    "draft": "Pull Request is still a draft",
}


def _approvals_wanted(count: int) -> str:
    """GitHub's refusal of a merge that branch protection's required approvals hold back."""
    what = "approving review is" if count == 1 else "approving reviews are"
    return f"At least {count} {what} required by reviewers with write access."


class MergeOps(SimulatorCore):
    async def merge_pr(self, repo_name: str, number: int, *, method: str = "merge",
                       sha: str | None = None, actor: str | None = None,
                       commit_title: str | None = None,
                       commit_message: str | None = None) -> dict:
        """PUT .../merge semantics; returns GitHub's `{sha, merged, message}` body.

        squash and rebase both make one commit with the merged tree on top of the base;
        merge makes a two-parent commit. The base ref moves by compare-and-set, so a push to
        the base in the meantime fails the merge instead of being overwritten.
        """
        if method not in MERGE_METHODS:
            raise Unprocessable(f"merge_method must be one of {', '.join(MERGE_METHODS)}",
                                "merge_method")
        repo, pr = self.pr(repo_name, number)
        actor = actor or repo.owner
        async with self.lock:
            if pr.state != "open":
                raise ApiError(405, "Pull Request is not mergeable")
            if (repo.full_name, pr.base_ref) in self.state.merge_queues:
                raise ApiError(405, REQUIRED_BY_QUEUE)
            heads = await self.heads(repo, pr)
            if sha is not None and sha != heads.head:
                raise ApiError(409, "Head branch was modified. Review and try the merge again.")
            _, state = await self.mergeability(repo, pr, heads)
            if state == "blocked" and self.state.review_decision(repo, pr) == "REVIEW_REQUIRED":
                raise ApiError(405, _approvals_wanted(repo.required_approving_reviews))
            if state in _REFUSALS:
                raise ApiError(405, _REFUSALS[state])
            tree = await self.git.merge_tree(repo.git_dir, heads.base, heads.head)
            if tree is None:
                pr.mergeable_state = "dirty"
                raise ApiError(405, "Pull Request is not mergeable")
            if method == "merge":
                owner = self.head_repo(repo, pr).owner
                title = commit_title or f"Merge pull request #{pr.number} from {owner}/{pr.head_ref}"
                parents = [heads.base, heads.head]
                body = commit_message if commit_message is not None else pr.title
            else:
                title = commit_title or f"{pr.title} (#{pr.number})"
                parents = [heads.base]
                body = commit_message or ""
            message = f"{title}\n\n{body}".strip() + "\n"
            merged = await self.git.commit_tree(repo.git_dir, tree, parents, message,
                                                self.author(actor))
            try:
                await self.git.update_ref(repo.git_dir, pr.base_ref, merged, heads.base)
            except RefMoved:
                raise ApiError(409, "Base branch was modified. Review and try the merge again.") from None
            stamp = now()
            pr.state, pr.closed_at, pr.merged_at, pr.updated_at = "closed", stamp, stamp, stamp
            pr.merged_by, pr.merge_commit_sha = actor, merged
            pr.last_head, pr.last_base = heads.head, heads.base
            await self._emit_push(repo, f"refs/heads/{pr.base_ref}", heads.base, merged, actor,
                                  via="merge")
            await self.emit_pr("closed", repo, pr, actor)
            if repo.delete_branch_on_merge and self.head_repo(repo, pr) is repo:
                await self._delete_branch(repo, pr.head_ref, actor)
        return {"sha": merged, "merged": True, "message": "Pull Request successfully merged"}

    async def update_branch(self, repo_name: str, number: int, *,
                            expected_head_sha: str | None = None,
                            actor: str | None = None) -> str:
        """Merge the base into the head branch (PUT .../update-branch). Returns the new head.

        A fork's branch is written only where its author allows edits by maintainers."""
        repo, pr = self.pr(repo_name, number)
        head_repo = self.head_repo(repo, pr)
        actor = actor or pr.user
        async with self.lock:
            if pr.state != "open":
                raise Unprocessable("pull request is closed", "state")
            if head_repo is not repo and not pr.maintainer_can_modify:
                raise Unprocessable("the head branch is in a fork that maintainers cannot modify",
                                    "head")
            heads = await self.heads(repo, pr)
            if expected_head_sha is not None and expected_head_sha != heads.head:
                raise Unprocessable("expected_head_sha does not match the pull request head",
                                    "expected_head_sha")
            if await self.git.is_ancestor(repo.git_dir, heads.base, heads.head):
                return heads.head  # already up to date
            tree = await self.git.merge_tree(repo.git_dir, heads.head, heads.base)
            if tree is None:
                raise Unprocessable("merge conflict between base and head", "base")
            message = f"Merge branch '{pr.base_ref}' into {pr.head_ref}\n"
            new = await self.git.commit_tree(repo.git_dir, tree, [heads.head, heads.base],
                                             message, self.author(actor))
            try:
                await self.git.update_ref(head_repo.git_dir, pr.head_ref, new, heads.head)
            except RefMoved:
                raise Unprocessable("head branch was modified", "expected_head_sha") from None
            if pr.mergeable_state == "behind":
                pr.mergeable_state = None
            await self._ref_moved(head_repo, f"refs/heads/{pr.head_ref}", heads.head, new, actor,
                                  via="update_branch")
        return new
