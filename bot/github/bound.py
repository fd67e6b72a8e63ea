"""GitHub as one repository, or one pull request, sees it: the client's calls with the
repository (and the PR's number) filled in from a key the caller already holds.

The engine and the effects work on one PR at a time; they take `client.pr(key)` (a
`PrGitHub`) and never spell `owner, repo, number` again. The calls are the client's own, with
its retries, caching, rate budget and request counting: this module only binds arguments.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from storage.keys import PrKey

if TYPE_CHECKING:
    from bot.github.client import GitHubClient
    from bot.github.endpoints.reviews import ThreadWrite


class RepoGitHub:
    """One repository's calls."""

    def __init__(self, client: GitHubClient, owner: str, repo: str) -> None:
        self.client, self.owner, self.repo = client, owner, repo

    @property
    def full_repo(self) -> str:
        return f"{self.owner}/{self.repo}"

    # -- reads ----------------------------------------------------------------------------------

    async def pull(self, number: int) -> dict:
        return await self.client.pull(self.owner, self.repo, number)

    async def file_text(self, path: str) -> tuple[str, str] | None:
        return await self.client.file_text(self.owner, self.repo, path)

    async def branch_head(self, branch: str, *, via: str | None = None) -> str:
        return await self.client.branch_head(self.owner, self.repo, branch, via=via)

    async def conflicting_files(self, base_ref: str, head_sha: str) -> list[str]:
        return await self.client.conflicting_files(self.owner, self.repo, base_ref, head_sha)

    async def merge_base(self, base: str, head: str) -> str:
        return await self.client.merge_base(self.owner, self.repo, base, head)

    async def open_pulls_headed(self, branch: str) -> list[dict]:
        return await self.client.open_pulls_headed(self.owner, self.repo, branch)

    async def open_pulls_based(self, branch: str) -> list[dict]:
        return await self.client.open_pulls_based(self.owner, self.repo, branch)

    async def pulls_by_update(self, since: datetime | None, **kw: Any) -> tuple[list[dict], bool, bool]:
        return await self.client.pulls_by_update(self.owner, self.repo, since, **kw)

    async def check_runs(self, ref: str, name: str | None = None) -> list[dict]:
        return await self.client.check_runs(self.owner, self.repo, ref, name)

    async def check_run_annotations(self, check_run_id: int, *, limit: int = 50) -> list[dict]:
        return await self.client.check_run_annotations(self.owner, self.repo, check_run_id, limit=limit)

    async def combined_status(self, ref: str) -> dict:
        return await self.client.combined_status(self.owner, self.repo, ref)

    async def comment(self, comment_id: int, *, review_comment: bool = False) -> dict:
        return await self.client.comment(self.owner, self.repo, comment_id, review_comment=review_comment)

    async def can_write(self, user: str, *, fresh: bool = False) -> bool:
        return await self.client.can_write(self.owner, self.repo, user, fresh=fresh)

    async def clone_token(self) -> str | None:
        return await self.client.clone_token(self.owner, self.repo)

    # -- writes (the effects') ------------------------------------------------------------------

    async def react(self, comment_id: int, content: str, *, review_comment: bool = False) -> None:
        await self.client.react(self.owner, self.repo, comment_id, content, review_comment=review_comment)

    async def create_check_run(self, **fields: Any) -> dict:
        return await self.client.create_check_run(self.owner, self.repo, **fields)

    async def update_check_run(self, check_run_id: int, **fields: Any) -> dict:
        return await self.client.update_check_run(self.owner, self.repo, check_run_id, **fields)

    async def write_threads(self, writes: Sequence[ThreadWrite]) -> None:
        await self.client.write_threads(writes, repo=self.full_repo)


class PrGitHub(RepoGitHub):
    """One pull request's calls (and its repository's)."""

    def __init__(self, client: GitHubClient, key: PrKey) -> None:
        super().__init__(client, key.owner, key.repo)
        self.key = key
        self.number = key.number

    @asynccontextmanager
    async def mutating(self) -> AsyncIterator[None]:
        """This PR's mutations one at a time (see `GitHubClient.mutating`)."""
        async with self.client.mutating(self.key):
            yield

    # -- reads ----------------------------------------------------------------------------------

    async def read(self) -> dict:
        """The pull request."""
        return await self.client.pull(self.owner, self.repo, self.number)

    async def reviews(self) -> list[dict]:
        return await self.client.reviews(self.owner, self.repo, self.number)

    async def review_threads(self) -> list[dict]:
        return await self.client.review_threads(self.owner, self.repo, self.number)

    async def review_state(self, head: str) -> tuple[list[dict], list[dict], dict]:
        return await self.client.review_state(self.owner, self.repo, self.number, head)

    async def requested_reviewers(self) -> list[str]:
        return await self.client.requested_reviewers(self.owner, self.repo, self.number)

    async def issue_comments(self, since: datetime | None = None) -> list[dict]:
        return await self.client.issue_comments(self.owner, self.repo, self.number, since=since)

    async def required_checks(self, head: str) -> set[str]:
        return await self.client.required_checks(self.owner, self.repo, self.number, head)

    async def review_requirement(self) -> tuple[str | None, dict | None]:
        return await self.client.review_requirement(self.owner, self.repo, self.number)

    async def merge_queue(self) -> dict:
        return await self.client.merge_queue(self.owner, self.repo, self.number)

    # -- writes (the effects') ------------------------------------------------------------------

    async def comment_once(self, marker: str, body: str) -> dict:
        return await self.client.comment_once(self.owner, self.repo, self.number, marker, body)

    async def request_review(self, reviewers: list[str], *, look: bool = True,
                             pending: Collection[str] | None = None) -> list[str]:
        return await self.client.request_review(self.owner, self.repo, self.number, reviewers,
                                                look=look, pending=pending)

    async def enqueue(self, node_id: str, expected_head: str) -> dict | None:
        return await self.client.enqueue(self.owner, self.repo, self.number, node_id, expected_head)

    async def merge(self, sha: str, method: str = "squash") -> dict:
        return await self.client.merge(self.owner, self.repo, self.number, sha, method)

    async def update_branch(self, expected_head: str) -> None:
        await self.client.update_branch(self.owner, self.repo, self.number, expected_head)

    async def retarget(self, base: str) -> dict:
        return await self.client.retarget(self.owner, self.repo, self.number, base)
