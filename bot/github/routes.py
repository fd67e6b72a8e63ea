"""The route template of each request the client makes (`/repos/{owner}/{repo}/pulls/{number}`),
never its URL: the metrics' label values stay few and carry no PR number, sha or branch."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

# GitHub's own templates (docs.github.com/rest), one for each URL `client.py` builds; the
# parameters named here may span slashes (a branch, a `base...head` comparison).
TEMPLATES = (
    "/rate_limit",
    "/graphql",
    "/installation/repositories",
    "/app/hook/deliveries",
    "/app/hook/deliveries/{delivery_id}/attempts",
    "/orgs/{org}/hooks/{hook_id}/deliveries",
    "/orgs/{org}/hooks/{hook_id}/deliveries/{delivery_id}/attempts",
    "/app/installations",
    "/app/installations/{installation_id}/access_tokens",
    "/repos/{owner}/{repo}",
    "/repos/{owner}/{repo}/installation",
    "/repos/{owner}/{repo}/pulls",
    "/repos/{owner}/{repo}/hooks/{hook_id}/deliveries",
    "/repos/{owner}/{repo}/hooks/{hook_id}/deliveries/{delivery_id}/attempts",
    "/repos/{owner}/{repo}/contents/{path}",
    "/repos/{owner}/{repo}/pulls/{number}",
    "/repos/{owner}/{repo}/pulls/{number}/reviews",
    "/repos/{owner}/{repo}/pulls/{number}/merge",
    "/repos/{owner}/{repo}/pulls/{number}/update-branch",
    "/repos/{owner}/{repo}/pulls/{number}/requested_reviewers",
    "/repos/{owner}/{repo}/pulls/{number}/copilot-code-review",
    "/repos/{owner}/{repo}/pulls/comments",
    "/repos/{owner}/{repo}/pulls/comments/{comment_id}",
    "/repos/{owner}/{repo}/pulls/comments/{comment_id}/reactions",
    "/repos/{owner}/{repo}/issues/comments",
    "/repos/{owner}/{repo}/issues/comments/{comment_id}",
    "/repos/{owner}/{repo}/issues/comments/{comment_id}/reactions",
    "/repos/{owner}/{repo}/issues/{number}/comments",
    "/repos/{owner}/{repo}/git/ref/{ref}",
    "/repos/{owner}/{repo}/compare/{basehead}",
    "/repos/{owner}/{repo}/commits/{ref}/check-runs",
    "/repos/{owner}/{repo}/commits/{ref}/status",
    "/repos/{owner}/{repo}/check-runs",
    "/repos/{owner}/{repo}/check-runs/{check_run_id}",
    "/repos/{owner}/{repo}/check-runs/{check_run_id}/annotations",
    "/repos/{owner}/{repo}/collaborators/{username}/permission",
)
# The next pages of a repository's listing: GitHub's `Link: rel="next"` names the repository by
# its id (`/repositories/8514/issues?page=2`), not by owner and name.
BY_ID = tuple("/repositories/{repository_id}/" + t.removeprefix("/repos/{owner}/{repo}/")
              for t in TEMPLATES if t.startswith("/repos/{owner}/{repo}/"))
_SPANNING = {"ref": ".+", "basehead": ".+", "path": ".+"}
_NUMERIC = {"number", "hook_id", "comment_id", "check_run_id", "delivery_id", "installation_id", "repository_id"}
OTHER = "other"  # a URL none of the templates matches: counted, never named


def _pattern(template: str) -> re.Pattern[str]:
    def param(m: re.Match[str]) -> str:
        name = m.group(1)
        return _SPANNING.get(name, r"\d+" if name in _NUMERIC else "[^/]+")

    return re.compile("^" + re.sub(r"\\\{(\w+)\\\}", param, re.escape(template)) + "$")


_PATTERNS = [(_pattern(t), t) for t in (*TEMPLATES, *BY_ID)]


def route_of(url: str) -> str:
    """The template of a relative or absolute API URL (a `Link: rel="next"` page is absolute)."""
    path = urlsplit(url).path.rstrip("/") or "/"
    path = path.removeprefix("/api/v3")  # GitHub Enterprise Server's API root, in next links
    for pattern, template in _PATTERNS:
        if pattern.match(path):
            return template
    return OTHER


def request_of(what: str) -> tuple[str, str]:
    """(method, route) of a `Transport._call` description: `GET /repos/...` or `graphql op`."""
    method, _, url = what.partition(" ")
    if method == "graphql":
        return "POST", "/graphql"
    return method, route_of(url)
