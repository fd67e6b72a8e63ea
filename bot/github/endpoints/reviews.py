"""A PR's reviews: those given, the reviewers requested and the requests made (Copilot through
its own endpoint), the review threads read and written (replies and resolves) through GraphQL, and
the review state a fresh review is read with: threads, check runs and statuses in one query."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from bot.github import shapes
from bot.github.answers import malformed
from bot.github.endpoints.checks import CheckEndpoints
from bot.github.errors import Conflict, NotFound

COPILOT_REVIEWER = "copilot-pull-request-reviewer[bot]"

THREAD_COMMENTS_READ = 50  # a thread's comments read with it (its first ones)

# A comment's id is read as `fullDatabaseId`, a BigInt GitHub sends as a string: the 32-bit
# `databaseId` is deprecated for it. GitHub may null any node of a `nodes` list.
_THREAD_PAGE = """
fragment ThreadPage on PullRequestReviewThreadConnection {
  pageInfo { hasNextPage endCursor }
  nodes {
    id isResolved isOutdated path line
    comments(first: THREAD_COMMENTS) { nodes { id fullDatabaseId body author { login } createdAt url } }
  }
}
""".replace("THREAD_COMMENTS", str(THREAD_COMMENTS_READ))

_THREADS_QUERY = """
query($owner: String!, $name: String!, $number: Int!, $after: String) {
  repository(owner: $owner, name: $name) {
    pullRequest(number: $number) {
      reviewThreads(first: 100, after: $after) { ...ThreadPage }
    }
  }
}
""" + _THREAD_PAGE

# A fresh review's reads in one request: the PR's review threads and the head commit's check
# runs and statuses. GitHub prices a query by the connections it may return (here 1 + 100 + 1
# page requests, /100, rounded): 1 point, like one REST read, where threads, check runs and the
# combined status were three.
_REVIEW_STATE_QUERY = """
query($owner: String!, $name: String!, $number: Int!, $head: GitObjectID!) {
  repository(owner: $owner, name: $name) {
    pullRequest(number: $number) {
      reviewThreads(first: 100) { ...ThreadPage }
    }
    object(oid: $head) {
      ... on Commit {
        statusCheckRollup {
          contexts(first: 100) {
            pageInfo { hasNextPage }
            nodes {
              __typename
              ... on CheckRun { name status conclusion checkSuite { app { slug } } }
              ... on StatusContext { context state }
            }
          }
        }
      }
    }
  }
}
""" + _THREAD_PAGE


# What holds a `blocked` PR for reviews: GitHub's review decision (`REVIEW_REQUIRED` while
# branch protection wants approvals the PR lacks; null where it wants none), and how many
# approvals, and whether a code owner's, the base branch's rule requires.
_REVIEW_REQUIREMENT_QUERY = """
query($owner: String!, $name: String!, $number: Int!) {
  repository(owner: $owner, name: $name) {
    pullRequest(number: $number) {
      reviewDecision
      baseRef { refUpdateRule { requiredApprovingReviewCount requiresCodeOwnerReviews } }
    }
  }
}
"""


@dataclass(frozen=True)
class ThreadWrite:
    """One thread's part of `GitHubClient.write_threads`: a reply (None: none) and whether to
    resolve the thread after it."""

    thread_id: str
    body: str | None
    resolve: bool


def threads_mutation(writes: Sequence[ThreadWrite]) -> tuple[str, dict[str, str]]:
    """One GraphQL document for every reply and resolve, with its variables. GitHub runs a
    document's mutations one after the other, in order, so each thread's reply lands before its
    resolve."""
    params, fields, variables = [], [], {}
    for i, w in enumerate(writes):
        params.append(f"$t{i}: ID!")
        variables[f"t{i}"] = w.thread_id
        if w.body is not None:
            params.append(f"$b{i}: String!")
            variables[f"b{i}"] = w.body
            fields.append(f"r{i}: addPullRequestReviewThreadReply(input: "
                          f"{{pullRequestReviewThreadId: $t{i}, body: $b{i}}}) {{ comment {{ id }} }}")
        if w.resolve:
            fields.append(f"s{i}: resolveReviewThread(input: {{threadId: $t{i}}}) {{ thread {{ id isResolved }} }}")
    return f"mutation({', '.join(params)}) {{\n  " + "\n  ".join(fields) + "\n}", variables


def _cursor(what: str, page: dict) -> str:
    """Where the next page of threads starts: a next page without a cursor would read the
    first page again (and its threads twice), or forever."""
    if not (cursor := page["pageInfo"]["endCursor"]):
        raise malformed(what, "pageInfo: hasNextPage without an endCursor")
    return cursor


class ReviewEndpoints(CheckEndpoints):
    """Over the checks: a review state whose checks do not fit its one query reads them by REST."""

    async def reviews(self, owner: str, repo: str, number: int) -> list[dict]:
        return await self._pages(f"/repos/{owner}/{repo}/pulls/{number}/reviews", shape=list[shapes.Review])

    async def review_requirement(self, owner: str, repo: str, number: int) -> tuple[str | None, dict | None]:
        """The PR's `reviewDecision` and its base branch's rule (`requiredApprovingReviewCount`,
        `requiresCodeOwnerReviews`; None: GitHub shows this app no rule). One GraphQL query."""
        data = await self._graphql("reviewRequirement", _REVIEW_REQUIREMENT_QUERY,
                                   {"owner": owner, "name": repo, "number": number}, shape=shapes.ReviewRequirement)
        pr = (data["repository"] or {}).get("pullRequest")
        if pr is None:
            raise NotFound(f"graphql reviewRequirement: {owner}/{repo}#{number} not found")
        return pr["reviewDecision"], (pr["baseRef"] or {}).get("refUpdateRule")

    async def review_threads(self, owner: str, repo: str, number: int, *, after: str | None = None) -> list[dict]:
        """The PR's review threads (those after the cursor `after`, when given)."""
        threads: list[dict] = []
        while True:
            data = await self._graphql(
                "reviewThreads", _THREADS_QUERY, {"owner": owner, "name": repo, "number": number, "after": after},
                shape=shapes.Threads,
            )
            pr = (data["repository"] or {}).get("pullRequest")
            if pr is None:
                raise NotFound(f"graphql reviewThreads: {owner}/{repo}#{number} not found")
            page = pr["reviewThreads"]
            threads.extend(t for t in page["nodes"] or [] if t)
            if not page["pageInfo"]["hasNextPage"]:
                return threads
            after = _cursor("graphql reviewThreads", page)

    async def review_state(self, owner: str, repo: str, number: int, head: str) -> tuple[list[dict], list[dict], dict]:
        """The PR's review threads, and the check runs and commit statuses on `head`, in the
        shapes of `review_threads`, `check_runs` and `combined_status`: one GraphQL request when
        each fits a page, else the rest is read the usual way."""
        data = await self._graphql("reviewState", _REVIEW_STATE_QUERY,
                                   {"owner": owner, "name": repo, "number": number, "head": head},
                                   shape=shapes.ReviewState)
        found = data["repository"] or {}
        pr = found.get("pullRequest")
        if pr is None:
            raise NotFound(f"graphql reviewState: {owner}/{repo}#{number} not found")
        page = pr["reviewThreads"]
        threads = [t for t in page["nodes"] or [] if t]  # GitHub may send null nodes
        if page["pageInfo"]["hasNextPage"]:
            threads += await self.review_threads(owner, repo, number, after=_cursor("graphql reviewState", page))
        commit = found.get("object")
        contexts = ((commit or {}).get("statusCheckRollup") or {}).get("contexts") or {}
        if commit is None or (contexts.get("pageInfo") or {}).get("hasNextPage"):
            # A head GitHub's GraphQL does not resolve must not read as "no checks, all green":
            # REST answers for it or fails; so does a list longer than one page.
            return threads, await self.check_runs(owner, repo, head), await self.combined_status(owner, repo, head)
        runs, statuses = [], []
        for node in contexts.get("nodes") or []:
            if not node:
                continue
            if node.get("__typename") == "CheckRun":
                runs.append({"name": node["name"], "status": node["status"].lower(),
                             "conclusion": (node.get("conclusion") or "").lower() or None,
                             "app": ((node.get("checkSuite") or {}).get("app") or {})})
            elif node.get("__typename") == "StatusContext":
                state = node["state"].lower()
                statuses.append({"context": node["context"], "state": "pending" if state == "expected" else state})
        return threads, runs, {"statuses": statuses}

    async def requested_reviewers(self, owner: str, repo: str, number: int) -> list[str]:
        data = await self._json("GET", f"/repos/{owner}/{repo}/pulls/{number}/requested_reviewers",
                                shape=shapes.RequestedReviewers)
        return [u["login"] for u in data["users"]]

    async def request_review(self, owner: str, repo: str, number: int, reviewers: list[str], *,
                             look: bool = True, pending: Collection[str] | None = None) -> list[str]:
        """Ask for reviews from those not already asked; Copilot through its endpoint where it
        exists, else as a reviewer. Returns whom it asked.

        Looking first makes a repeat harmless: a request whose answer was lost (GitHub did it,
        then answered 502) is seen as pending and not made again. `look=False` (a first try:
        nothing of ours can be pending) asks at once; GitHub answers a Copilot review already
        pending with a 409, and a person already requested stays requested. `pending`: who the
        caller read as requested (it read them before the reviews, see `bot/effects/runner.py`); then
        no look is made here.
        """
        async with self.mutating(f"{owner}/{repo}#{number}"):
            if pending is None and look:
                pending = await self.requested_reviewers(owner, repo, number)
            pending = {login.lower() for login in pending or ()}
            wanted = [r for r in reviewers if r.lower() not in pending]
            people = [r for r in wanted if r != COPILOT_REVIEWER]
            if COPILOT_REVIEWER in wanted:
                try:
                    await self._json("POST", f"/repos/{owner}/{repo}/pulls/{number}/copilot-code-review")
                except Conflict:
                    pass  # 409: a Copilot review is already pending
                except NotFound:
                    people.append(COPILOT_REVIEWER)  # GHES has no such endpoint
            if people:
                await self._json(
                    "POST", f"/repos/{owner}/{repo}/pulls/{number}/requested_reviewers", json={"reviewers": people}
                )
            return wanted

    async def write_threads(self, writes: Sequence[ThreadWrite], *, repo: str | None = None) -> None:
        """Every reply and resolve of `writes` in one GraphQL request (nothing when empty).
        `repo` (owner/repo): the threads' repository, whose installation the request goes to."""
        writes = [w for w in writes if w.body is not None or w.resolve]
        if writes:
            query, variables = threads_mutation(writes)
            await self._graphql("writeThreads", query, variables, repo=repo)
