"""Commit objects in their three GitHub forms: push-event, suite head_commit, and REST."""

from __future__ import annotations

from ..gitstore import CommitInfo
from ..ids import node_id
from ..state import Repo
from .context import RenderContext


def _person(c: CommitInfo) -> dict:
    return {"name": c.author.name, "email": c.author.email}


def push_commit(ctx: RenderContext, repo: Repo, c: CommitInfo, files: dict[str, list[str]] | None = None) -> dict:
    """`files`: the paths it added, removed and modified (GitHub lists them in a push event)."""
    person = {**_person(c), "username": c.author.name}
    return {"id": c.sha, "tree_id": c.tree, "distinct": True, "message": c.message,
            "timestamp": c.timestamp, "url": ctx.html(f"{repo.full_name}/commit/{c.sha}"),
            "author": person, "committer": person,
            "added": [], "removed": [], "modified": [], **(files or {})}


def head_commit(c: CommitInfo) -> dict:
    return {"id": c.sha, "tree_id": c.tree, "message": c.message, "timestamp": c.timestamp,
            "author": _person(c), "committer": _person(c)}


def commit(ctx: RenderContext, repo: Repo, c: CommitInfo) -> dict:
    api = ctx.api(f"repos/{repo.full_name}")
    html = ctx.html(f"{repo.full_name}/commit/{c.sha}")
    dated = {**_person(c), "date": c.timestamp}
    return {
        "sha": c.sha,
        "node_id": node_id("C", int(c.sha[:12], 16)),
        "commit": {"author": dated, "committer": dated, "message": c.message,
                   "tree": {"sha": c.tree, "url": f"{api}/git/trees/{c.tree}"},
                   "url": f"{api}/git/commits/{c.sha}", "comment_count": 0,
                   "verification": {"verified": False, "reason": "unsigned", "signature": None,
                                    "payload": None, "verified_at": None}},
        "url": f"{api}/commits/{c.sha}",
        "html_url": html,
        "comments_url": f"{api}/commits/{c.sha}/comments",
        "author": None,
        "committer": None,
        "parents": [{"sha": p, "url": f"{api}/commits/{p}",
                     "html_url": ctx.html(f"{repo.full_name}/commit/{p}")} for p in c.parents],
    }
