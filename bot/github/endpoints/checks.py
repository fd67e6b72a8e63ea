"""What a head's checks say: its check runs (read, created, updated) and their annotations, its
commit statuses, and which of them branch protection requires before the PR can merge."""

from __future__ import annotations

from typing import Any

from bot.github import shapes
from bot.github.transport import Transport

# Which checks on a head branch protection requires for the PR (first 100: a longer list is cut).
_REQUIRED_CHECKS_QUERY = """
query($owner: String!, $name: String!, $number: Int!, $head: GitObjectID!) {
  repository(owner: $owner, name: $name) {
    pullRequest(number: $number) { baseRef { refUpdateRule { requiredStatusCheckContexts } } }
    object(oid: $head) {
      ... on Commit {
        statusCheckRollup {
          contexts(first: 100) {
            nodes {
              __typename
              ... on CheckRun { name isRequired(pullRequestNumber: $number) }
              ... on StatusContext { context isRequired(pullRequestNumber: $number) }
            }
          }
        }
      }
    }
  }
}
"""


class CheckEndpoints(Transport):
    async def check_runs(self, owner: str, repo: str, ref: str, name: str | None = None) -> list[dict]:
        params = {"check_name": name} if name else None
        pages = await self._pages(f"/repos/{owner}/{repo}/commits/{ref}/check-runs", params, shape=shapes.CheckRuns)
        return [run for page in pages for run in page["check_runs"]]

    async def check_run_annotations(self, owner: str, repo: str, check_run_id: int, *, limit: int = 50) -> list[dict]:
        """The first `limit` annotations of a check run (one page)."""
        return await self._json("GET", f"/repos/{owner}/{repo}/check-runs/{check_run_id}/annotations",
                                shape=list[shapes.Annotation], params={"per_page": min(limit, 100)})

    async def combined_status(self, owner: str, repo: str, ref: str) -> dict:
        return await self._json("GET", f"/repos/{owner}/{repo}/commits/{ref}/status", shape=shapes.CombinedStatus)

    async def create_check_run(self, owner: str, repo: str, **fields: Any) -> dict:
        return await self._json("POST", f"/repos/{owner}/{repo}/check-runs", shape=shapes.Created, json=fields)

    async def update_check_run(self, owner: str, repo: str, check_run_id: int, **fields: Any) -> dict:
        return await self._json("PATCH", f"/repos/{owner}/{repo}/check-runs/{check_run_id}", json=fields)

    async def required_checks(self, owner: str, repo: str, number: int, head: str) -> set[str]:
        """The names of the checks that branch protection requires before the PR can be merged:
        those on `head` (`isRequired` of each check run and status) and those its base branch's
        rule names (`requiredStatusCheckContexts`), which a check that never reported is only
        in. One GraphQL query."""
        data = await self._graphql("requiredChecks", _REQUIRED_CHECKS_QUERY,
                                   {"owner": owner, "name": repo, "number": number, "head": head},
                                   shape=shapes.RequiredChecks)
        repository = data["repository"] or {}
        rollup = (repository.get("object") or {}).get("statusCheckRollup")
        nodes = (rollup["contexts"]["nodes"] if rollup else None) or []
        rule = (((repository.get("pullRequest") or {}).get("baseRef") or {}).get("refUpdateRule") or {})
        named = {c for c in rule.get("requiredStatusCheckContexts") or () if c}
        return named | {name for n in nodes if n and n["isRequired"] and (name := n.get("name") or n.get("context"))}
