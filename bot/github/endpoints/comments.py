"""Comments on a PR or issue and on a PR's diff: one, those of a PR, those of a repository since
a time (the scan's), a comment posted at most once (its hidden marker looked for first), and a
reaction."""

from __future__ import annotations

from datetime import datetime

from bot.github import shapes
from bot.github.transport import Transport


class CommentEndpoints(Transport):
    async def issue_comments(self, owner: str, repo: str, number: int, since: datetime | None = None) -> list[dict]:
        """The PR's issue comments (updated at or after `since`, when given)."""
        params = {"since": since.strftime("%Y-%m-%dT%H:%M:%SZ")} if since else None
        return await self._pages(f"/repos/{owner}/{repo}/issues/{number}/comments", params,
                                 shape=list[shapes.Comment])

    async def repo_comments(self, owner: str, repo: str, since: datetime, *, review: bool = False,
                            max_pages: int = 10) -> list[dict]:
        """Comments on any PR or issue of the repository (`review`: the PRs' review comments
        instead) updated at or after `since`, the oldest update first: a reader that stops
        after `max_pages` pages goes on from the newest one it saw."""
        path = "pulls/comments" if review else "issues/comments"
        params = {"since": since.strftime("%Y-%m-%dT%H:%M:%SZ"), "sort": "updated", "direction": "asc"}
        return await self._pages(f"/repos/{owner}/{repo}/{path}", params, shape=list[shapes.Comment],
                                 max_pages=max_pages)

    async def comment(self, owner: str, repo: str, comment_id: int, *, review_comment: bool = False) -> dict:
        kind = "pulls" if review_comment else "issues"
        return await self._json("GET", f"/repos/{owner}/{repo}/{kind}/comments/{comment_id}", shape=shapes.Comment)

    async def comment_once(self, owner: str, repo: str, number: int, marker: str, body: str) -> dict:
        """Post an issue comment carrying a hidden marker, unless one with the marker exists.

        A retried job would otherwise post the same escalation or reply twice.
        """
        tag = f"<!-- {marker} -->"
        async with self.mutating(f"{owner}/{repo}#{number}"):
            for existing in await self.issue_comments(owner, repo, number):
                if tag in (existing.get("body") or ""):
                    return existing
            return await self._json("POST", f"/repos/{owner}/{repo}/issues/{number}/comments",
                                    shape=shapes.Created, json={"body": f"{body}\n\n{tag}"})

    async def react(self, owner: str, repo: str, comment_id: int, content: str, *, review_comment: bool = False) -> None:
        kind = "pulls" if review_comment else "issues"
        await self._json(
            "POST", f"/repos/{owner}/{repo}/{kind}/comments/{comment_id}/reactions", json={"content": content}
        )
