"""Pull request objects: the list shape and the full single-PR shape."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from ..ids import iso, node_id
from ..state import PullRequest, Repo
from .context import RenderContext
from .reactions import rollup
from .repos import repository
from .users import user


@dataclass(frozen=True)
class Heads:
    """Branch tips read from git for one render; a PR never caches them."""

    head: str
    base: str


@dataclass(frozen=True)
class DiffStats:
    commits: int = 0
    additions: int = 0
    deletions: int = 0
    changed_files: int = 0


def label(ctx: RenderContext, repo: Repo, name: str) -> dict:
    # Label ids only need to be stable per (repo, name).
    label_id = 500_000_000 + zlib.crc32(f"{repo.full_name}:{name}".encode()) % 100_000_000
    return {
        "id": label_id,
        "node_id": node_id("LA", label_id),
        "url": ctx.api(f"repos/{repo.full_name}/labels/{name}"),
        "name": name,
        "color": "ededed",
        "default": False,
        # A string, never null: `pull-request-simple` (PR lists, the review-request answer)
        # requires one, though GitHub sends null for an undescribed label
        # (github/rest-api-description#1812). An empty description satisfies every shape.
        "description": "",
        "archived_by": None,  # REST and webhook schemas name the archive field differently
        "archived_at": None,
    }


def _branch(ctx: RenderContext, repo: Repo, repo_json: dict, ref: str, sha: str) -> dict:
    return {"label": f"{repo.owner}:{ref}", "ref": ref, "sha": sha,
            "user": user(ctx, repo.owner), "repo": repo_json}


def pull_request(ctx: RenderContext, repo: Repo, pr: PullRequest, heads: Heads, *,
                 full: bool = False, stats: DiffStats | None = None,
                 head_repo: Repo | None = None,
                 mergeability: tuple[bool | None, str] | None = None) -> dict:
    """`pull-request-simple` (lists) or, with `full`, the single-PR shape with merge fields.
    `head_repo`: the fork holding the head branch, for a PR from a fork; `mergeability`:
    (mergeable, mergeable_state) as computed from git (core.mergeability)."""
    api = ctx.api(f"repos/{repo.full_name}/pulls/{pr.number}")
    issue = ctx.api(f"repos/{repo.full_name}/issues/{pr.number}")
    html = ctx.html(f"{repo.full_name}/pull/{pr.number}")
    statuses = ctx.api(f"repos/{repo.full_name}/statuses/{heads.head}")
    repo_json = repository(ctx, repo)
    head_repo = head_repo or repo
    head_json = repo_json if head_repo is repo else repository(ctx, head_repo)
    data = {
        "url": api,
        "id": pr.id,
        "node_id": pr.node_id,
        "html_url": html,
        "diff_url": f"{html}.diff",
        "patch_url": f"{html}.patch",
        "issue_url": issue,
        "commits_url": f"{api}/commits",
        "review_comments_url": f"{api}/comments",
        "review_comment_url": ctx.api(f"repos/{repo.full_name}/pulls/comments{{/number}}"),
        "comments_url": f"{issue}/comments",
        "statuses_url": statuses,
        "number": pr.number,
        "state": pr.state,
        "locked": False,
        "title": pr.title,
        "user": user(ctx, pr.user),
        "body": pr.body,
        "labels": [label(ctx, repo, name) for name in pr.labels],
        "milestone": None,
        "active_lock_reason": None,
        "created_at": iso(pr.created_at),
        "updated_at": iso(pr.updated_at),
        "closed_at": iso(pr.closed_at),
        "merged_at": iso(pr.merged_at),
        "merge_commit_sha": pr.merge_commit_sha,
        "assignee": None,
        "assignees": [],
        "requested_reviewers": [user(ctx, login) for login in pr.requested_reviewers],
        "requested_teams": [],
        "head": _branch(ctx, head_repo, head_json, pr.head_ref, heads.head),
        "base": _branch(ctx, repo, repo_json, pr.base_ref, heads.base),
        "_links": {
            "self": {"href": api},
            "html": {"href": html},
            "issue": {"href": issue},
            "comments": {"href": f"{issue}/comments"},
            "review_comments": {"href": f"{api}/comments"},
            "review_comment": {"href": ctx.api(f"repos/{repo.full_name}/pulls/comments{{/number}}")},
            "commits": {"href": f"{api}/commits"},
            "statuses": {"href": statuses},
        },
        "author_association": ctx.association(repo, pr.user),
        "auto_merge": None,
        "draft": pr.draft,
    }
    if full:
        stats = stats or DiffStats()
        mergeable, mergeable_state = mergeability or pr.mergeability()
        data.update({
            "merged": pr.merged,
            "mergeable": mergeable,
            "rebaseable": mergeable,
            "mergeable_state": mergeable_state,
            "merged_by": user(ctx, pr.merged_by) if pr.merged_by else None,
            "comments": len(pr.issue_comment_ids),
            "review_comments": len(pr.review_comment_ids),
            "maintainer_can_modify": pr.maintainer_can_modify,
            "commits": stats.commits,
            "additions": stats.additions,
            "deletions": stats.deletions,
            "changed_files": stats.changed_files,
        })
    return data


def issue_of(ctx: RenderContext, repo: Repo, pr: PullRequest) -> dict:
    """The PR seen as an issue (issue_comment payloads), with the `pull_request` key set."""
    api = ctx.api(f"repos/{repo.full_name}/issues/{pr.number}")
    pull_api = ctx.api(f"repos/{repo.full_name}/pulls/{pr.number}")
    html = ctx.html(f"{repo.full_name}/pull/{pr.number}")
    return {
        "url": api,
        "repository_url": ctx.api(f"repos/{repo.full_name}"),
        "labels_url": f"{api}/labels{{/name}}",
        "comments_url": f"{api}/comments",
        "events_url": f"{api}/events",
        "html_url": html,
        "id": pr.id,
        "node_id": pr.node_id,
        "number": pr.number,
        "title": pr.title,
        "user": user(ctx, pr.user),
        "labels": [label(ctx, repo, name) for name in pr.labels],
        "state": pr.state,
        "locked": False,
        "assignee": None,
        "assignees": [],
        "milestone": None,
        "comments": len(pr.issue_comment_ids),
        "created_at": iso(pr.created_at),
        "updated_at": iso(pr.updated_at),
        "closed_at": iso(pr.closed_at),
        "author_association": ctx.association(repo, pr.user),
        "active_lock_reason": None,
        "draft": pr.draft,
        "pull_request": {
            "url": pull_api,
            "html_url": html,
            "diff_url": f"{html}.diff",
            "patch_url": f"{html}.patch",
            "merged_at": iso(pr.merged_at),
        },
        "body": pr.body,
        "state_reason": None,
        "reactions": rollup(api, []),
    }
