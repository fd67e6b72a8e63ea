"""A PR itself and its merge: the PR, the repository's open PRs and its PRs by last update (the
repository watch's one conditional read), the merge queue's view of a PR and its enqueueing, the
merge on the converged head, the branch update, and a stacked PR's retarget."""

from __future__ import annotations

from datetime import UTC, datetime

from githubkit.exception import GraphQLFailed

from bot.github import shapes
from bot.github.answers import checked, decoded
from bot.github.errors import Conflict, GitHubError, NotFound
from bot.github.stamps import parse_time
from bot.github.transport import Transport

# Whether the PR's base takes changes only through a merge queue, and the PR's place in it
# (`mergeQueueEntry` is null when it is not queued; `headCommit` is its merge group).
_QUEUE_ENTRY = "mergeQueueEntry { id state position headCommit { oid } }"
_MERGE_QUEUE_QUERY = """
query($owner: String!, $name: String!, $number: Int!) {
  repository(owner: $owner, name: $name) {
    pullRequest(number: $number) {
      id state headRefOid isMergeQueueEnabled isInMergeQueue ENTRY
    }
  }
}
""".replace("ENTRY", _QUEUE_ENTRY)
_ENQUEUE_MUTATION = """
mutation($id: ID!, $head: GitObjectID!) {
  enqueuePullRequest(input: {pullRequestId: $id, expectedHeadOid: $head}) { ENTRY }
}
""".replace("ENTRY", _QUEUE_ENTRY)

_LONG_AGO = datetime.min.replace(tzinfo=UTC)


class PullEndpoints(Transport):
    async def pull(self, owner: str, repo: str, number: int) -> dict:
        return await self._json("GET", f"/repos/{owner}/{repo}/pulls/{number}", shape=shapes.Pull)

    async def open_pulls(self, owner: str, repo: str) -> list[dict]:
        return await self._pages(f"/repos/{owner}/{repo}/pulls", {"state": "open"}, shape=list[shapes.Pull])

    async def open_pulls_headed(self, owner: str, repo: str, branch: str) -> list[dict]:
        """The open PRs whose head is `branch` of this repository (one page: a branch heads one
        open PR per base at most)."""
        return await self._json("GET", f"/repos/{owner}/{repo}/pulls", shape=list[shapes.Pull],
                                params={"state": "open", "head": f"{owner}:{branch}", "per_page": 10})

    async def open_pulls_based(self, owner: str, repo: str, branch: str) -> list[dict]:
        """The open PRs whose base is `branch` (a stacked PR's children: one page of 100)."""
        return await self._json("GET", f"/repos/{owner}/{repo}/pulls", shape=list[shapes.Pull],
                                params={"state": "open", "base": branch, "per_page": 100})

    async def pulls_by_update(self, owner: str, repo: str, since: datetime | None, *,
                              per_page: int = 30, max_pages: int = 10) -> tuple[list[dict], bool, bool]:
        """The repository's PRs (open and closed), most recently updated first, down to the
        first one updated before `since`: `(pulls, unchanged, complete)`.

        Any change to a PR (a push, a review, a state change) moves it to the top of this list,
        so a 304 for the first page (`unchanged`, free of rate limit) says no PR of the
        repository changed since this process last read it. `complete` is False when
        `max_pages` pages did not reach `since` (or there was no `since` to reach).
        """
        pulls: list[dict] = []
        url = f"/repos/{owner}/{repo}/pulls"
        # Any page size tells "nothing changed" (the newest item would differ); a small first
        # page is cheaper to send and parse, and more are read only when many PRs changed.
        query: dict | None = {"state": "all", "sort": "updated", "direction": "desc", "per_page": per_page}
        unchanged = False
        for page_no in range(max_pages):
            with self.tracking_reads() as reads:
                # The next pages' links name the repository by id: its name is kept for them.
                raw = await self._request("GET", url, repo=f"{owner}/{repo}", params=query)
            if page_no == 0:
                unchanged = reads.all_unchanged
            what = f"GET {url}"
            page = checked(what, decoded(what, raw), list[shapes.Pull])
            pulls.extend(page)
            if since is not None and (not page or (parse_time(page[-1].get("updated_at")) or _LONG_AGO) < since):
                return pulls, unchanged, True
            next_url = raw.links.get("next", {}).get("url")
            if next_url is None:
                return pulls, unchanged, True  # every PR of the repository is listed
            url, query = next_url, None
        return pulls, unchanged, False

    async def merge_queue(self, owner: str, repo: str, number: int) -> dict:
        """The PR's `id`, `state`, `headRefOid`, whether its base requires a merge queue
        (`isMergeQueueEnabled`), and its place in it (`isInMergeQueue`, `mergeQueueEntry`): one
        GraphQL query."""
        data = await self._graphql("mergeQueue", _MERGE_QUEUE_QUERY, {"owner": owner, "name": repo, "number": number},
                                   shape=shapes.MergeQueue)
        pr = (data["repository"] or {}).get("pullRequest")
        if pr is None:
            raise NotFound(f"graphql mergeQueue: {owner}/{repo}#{number} not found")
        return pr

    async def enqueue(self, owner: str, repo: str, number: int, node_id: str, expected_head: str) -> dict | None:
        """Put the PR (`node_id`) in its base's merge queue if its head is still `expected_head`;
        its entry (None once it already left the queue). GitHub's refusal (the head moved, the PR
        cannot be queued) is a Conflict. A repeat is not harmless by itself: read `merge_queue`
        first."""
        async with self.mutating(f"{owner}/{repo}#{number}"):
            try:
                data = await self._graphql("enqueuePullRequest", _ENQUEUE_MUTATION,
                                           {"id": node_id, "head": expected_head}, shape=shapes.Enqueue,
                                           repo=f"{owner}/{repo}")
            except GitHubError as e:
                if isinstance(e.__cause__, GraphQLFailed):
                    raise Conflict(str(e)) from e
                raise
        return (data.get("enqueuePullRequest") or {}).get("mergeQueueEntry")

    async def merge(self, owner: str, repo: str, number: int, sha: str, method: str = "squash") -> dict:
        """Merge only if the head is still `sha` (GitHub answers 409 otherwise)."""
        async with self.mutating(f"{owner}/{repo}#{number}"):
            # `sha` is the precondition: a push after convergence (between our decision and this
            # PUT) makes GitHub refuse, instead of merging code no round reviewed.
            return await self._json(
                "PUT", f"/repos/{owner}/{repo}/pulls/{number}/merge", json={"sha": sha, "merge_method": method}
            )

    async def retarget(self, owner: str, repo: str, number: int, base: str) -> dict:
        """Change the PR's base branch to `base` (a repeat asks for what already is: harmless)."""
        async with self.mutating(f"{owner}/{repo}#{number}"):
            return await self._json("PATCH", f"/repos/{owner}/{repo}/pulls/{number}", json={"base": base},
                                    shape=shapes.Pull)

    async def update_branch(self, owner: str, repo: str, number: int, expected_head: str) -> None:
        async with self.mutating(f"{owner}/{repo}#{number}"):
            await self._json(
                "PUT", f"/repos/{owner}/{repo}/pulls/{number}/update-branch", json={"expected_head_sha": expected_head}
            )
