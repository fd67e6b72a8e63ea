"""Repository objects, with `clone_url` pointing at the real bare git repository."""

from __future__ import annotations

from typing import Any

from ..ids import iso
from ..state import Repo
from .context import RenderContext
from .users import user

# (field, path suffix) of the URL templates every repository object carries.
_URLS = [
    ("archive_url", "/{archive_format}{/ref}"), ("assignees_url", "/assignees{/user}"),
    ("blobs_url", "/git/blobs{/sha}"), ("branches_url", "/branches{/branch}"),
    ("collaborators_url", "/collaborators{/collaborator}"), ("comments_url", "/comments{/number}"),
    ("commits_url", "/commits{/sha}"), ("compare_url", "/compare/{base}...{head}"),
    ("contents_url", "/contents/{+path}"), ("contributors_url", "/contributors"),
    ("deployments_url", "/deployments"), ("downloads_url", "/downloads"),
    ("events_url", "/events"), ("forks_url", "/forks"), ("git_commits_url", "/git/commits{/sha}"),
    ("git_refs_url", "/git/refs{/sha}"), ("git_tags_url", "/git/tags{/sha}"),
    ("issue_comment_url", "/issues/comments{/number}"), ("issue_events_url", "/issues/events{/number}"),
    ("issues_url", "/issues{/number}"), ("keys_url", "/keys{/key_id}"), ("labels_url", "/labels{/name}"),
    ("languages_url", "/languages"), ("merges_url", "/merges"), ("milestones_url", "/milestones{/number}"),
    ("notifications_url", "/notifications{?since,all,participating}"), ("pulls_url", "/pulls{/number}"),
    ("releases_url", "/releases{/id}"), ("stargazers_url", "/stargazers"),
    ("statuses_url", "/statuses/{sha}"), ("subscribers_url", "/subscribers"),
    ("subscription_url", "/subscription"), ("tags_url", "/tags"), ("teams_url", "/teams"),
    ("trees_url", "/git/trees{/sha}"), ("hooks_url", "/hooks"),
]


def repository(ctx: RenderContext, repo: Repo) -> dict:
    url = ctx.api(f"repos/{repo.full_name}")
    clone = repo.git_dir.as_uri()
    stamp = iso(repo.created_at)
    open_prs = sum(1 for pr in ctx.state.prs_of(repo) if pr.state == "open")
    data: dict[str, Any] = {
        "id": repo.id,
        "node_id": repo.node_id,
        "name": repo.name,
        "full_name": repo.full_name,
        "private": repo.private,
        "owner": user(ctx, repo.owner),
        "html_url": ctx.html(repo.full_name),
        "description": repo.description,
        "fork": repo.fork,
        "url": url,
        **{name: url + suffix for name, suffix in _URLS},
        "git_url": clone,
        "ssh_url": clone,
        "clone_url": clone,
        "svn_url": clone,
        "mirror_url": None,
        "homepage": None,
        "language": None,
        "forks_count": 0,
        "forks": 0,
        "stargazers_count": 0,
        "watchers_count": 0,
        "watchers": 0,
        "size": 0,
        "default_branch": repo.default_branch,
        "open_issues_count": open_prs,
        "open_issues": open_prs,
        "is_template": False,
        "topics": [],
        "has_issues": True,
        "has_projects": False,
        "has_wiki": False,
        "has_pages": False,
        "has_downloads": False,
        "has_discussions": False,
        "archived": False,
        "disabled": False,
        "visibility": "public",
        "license": None,
        "allow_forking": True,
        "web_commit_signoff_required": False,
        "pushed_at": stamp,
        "created_at": stamp,
        "updated_at": stamp,
    }
    return data


def full_repository(ctx: RenderContext, repo: Repo) -> dict:
    """GET /repos/{owner}/{repo} adds counts and merge settings to the embedded shape."""
    return {
        **repository(ctx, repo),
        "subscribers_count": 0,
        "network_count": 0,
        "allow_squash_merge": True,
        "allow_merge_commit": True,
        "allow_rebase_merge": True,
        "allow_auto_merge": False,
        "delete_branch_on_merge": repo.delete_branch_on_merge,
        "allow_update_branch": True,
        "permissions": {"admin": True, "maintain": True, "push": True, "triage": True,
                        "pull": True},
    }
