"""A repository's own reads: the repository, a file on its default branch, a branch's head, the
files two branches both changed, and a user's permission on it (cached briefly)."""

from __future__ import annotations

import base64
import binascii
import time
from typing import Any
from urllib.parse import quote

from bot.github import shapes
from bot.github.answers import malformed
from bot.github.errors import NotFound
from bot.github.transport import Transport

PERMISSION_TTL_SECONDS = 60.0
WRITE_PERMISSIONS = frozenset({"admin", "maintain", "write"})


def _changed_paths(comparison: dict) -> set[str]:
    """Every path a comparison's files touch (a rename touches its old name too)."""
    files = comparison.get("files") or []
    return {f["filename"] for f in files} | {f["previous_filename"] for f in files
                                             if f.get("previous_filename")}


class RepositoryEndpoints(Transport):
    # (owner, repo, user) -> (when read, permission); set by GitHubClient.__init__
    _permissions: dict[tuple[str, str, str], tuple[float, str]]

    async def repo(self, owner: str, repo: str) -> dict:
        return await self._json("GET", f"/repos/{owner}/{repo}", shape=shapes.Named)

    async def file_text(self, owner: str, repo: str, path: str) -> tuple[str, str] | None:
        """`(text, blob sha)` of a file on the repository's default branch, None when there is
        none (404). Conditional like every read: an unchanged file is a 304, free of rate limit."""
        url = f"/repos/{owner}/{repo}/contents/{quote(path)}"
        try:
            data = await self._json("GET", url, shape=shapes.Contents | list[Any])
        except NotFound:
            return None
        if isinstance(data, list) or data["type"] != "file":
            return None  # a directory, a symlink or a submodule of that name: no file
        try:
            # GitHub wraps its base64 in lines; anything else in it is no base64 at all.
            raw = base64.b64decode("".join((data.get("content") or "").split()), validate=True)
        except binascii.Error:
            raise malformed(f"GET {url}", "content is not base64") from None
        return raw.decode("utf-8", errors="replace"), data["sha"]

    async def branch_head(self, owner: str, repo: str, branch: str, *, via: str | None = None) -> str:
        """The head from the branch ref: the PR object's head.sha lags after a push.

        `via` (owner/repo): the repository whose installation reads it, when that is not
        `owner/repo`: a PR's base repository, for the branch of a fork in an account without the
        App (any installation's token reads a public repository; looking the fork's owner up would
        find no installation, and cost an App request each time)."""
        ref = await self._json("GET", f"/repos/{owner}/{repo}/git/ref/heads/{branch}", shape=shapes.Ref, repo=via)
        return ref["object"]["sha"]

    async def merge_base(self, owner: str, repo: str, base: str, head: str) -> str:
        """The commit where `head`'s history and `base`'s parted (both shas or branches)."""
        basehead = f"{quote(base, safe='/')}...{quote(head, safe='/')}"
        ours = await self._json("GET", f"/repos/{owner}/{repo}/compare/{basehead}", shape=shapes.Comparison)
        return ours["merge_base_commit"]["sha"]

    async def conflicting_files(self, owner: str, repo: str, base_ref: str, head_sha: str) -> list[str]:
        """The files changed on both sides since the head and the base parted, sorted: the
        head's side from `compare/{base}...{head}`, the base's from `compare/{merge base}...{base}`
        (two conditional GETs: an unchanged pair costs no rate limit).

        An approximation of the files GitHub finds in conflict, not its answer (the API has
        none): a file both sides changed may still merge cleanly, and GitHub lists at most 300
        files of a comparison. It tells a fixer where to look."""
        base = quote(base_ref, safe="/")
        url = f"/repos/{owner}/{repo}/compare"
        ours = await self._json("GET", f"{url}/{base}...{head_sha}", shape=shapes.Comparison)
        merge_base = ours["merge_base_commit"]["sha"]
        theirs = await self._json("GET", f"{url}/{merge_base}...{base}", shape=shapes.Comparison)
        return sorted(_changed_paths(ours) & _changed_paths(theirs))

    async def permission(self, owner: str, repo: str, user: str, *, fresh: bool = False) -> str:
        """The user's permission on the repo (`admin`/`maintain`/`write`/...), cached briefly.

        `fresh` skips the cache: a command that changes state must not run on a permission
        revoked within the last minute. The read is conditional, so while the permission is
        unchanged GitHub answers 304 and it costs no rate limit.
        """
        key = (owner, repo, user.lower())
        hit = self._permissions.get(key)
        if hit and not fresh and time.monotonic() - hit[0] < PERMISSION_TTL_SECONDS:
            return hit[1]
        try:
            data = await self._json("GET", f"/repos/{owner}/{repo}/collaborators/{user}/permission",
                                    shape=shapes.Permission)
            level = data.get("role_name") or data.get("permission") or "none"
        except NotFound:
            level = "none"
        self._permissions[key] = (time.monotonic(), level)
        return level

    async def can_write(self, owner: str, repo: str, user: str, *, fresh: bool = False) -> bool:
        return await self.permission(owner, repo, user, fresh=fresh) in WRITE_PERMISSIONS
