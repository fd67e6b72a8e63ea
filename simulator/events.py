"""Webhook payload parts that are not a plain rendered object: push and review-thread bodies."""

from __future__ import annotations

from .gitstore import ZERO_SHA, CommitInfo
from .shapes import RenderContext
from .shapes.commits import push_commit
from .state import Repo


def push_fields(ctx: RenderContext, repo: Repo, *, ref: str, before: str, after: str,
                commits: list[CommitInfo], forced: bool, pusher: str,
                files: dict[str, dict[str, list[str]]] | None = None) -> dict:
    """The body of a `push` event, minus repository and sender; `files`: by commit sha, what
    each added, removed and modified."""
    listed = [push_commit(ctx, repo, c, (files or {}).get(c.sha)) for c in commits]
    return {
        "ref": ref,
        "before": before,
        "after": after,
        "created": before == ZERO_SHA,
        "deleted": after == ZERO_SHA,
        "forced": forced,
        "base_ref": None,
        "compare": ctx.html(f"{repo.full_name}/compare/{before[:12]}...{after[:12]}"),
        "commits": listed,
        "head_commit": listed[-1] if listed else None,
        "pusher": {"name": pusher, "email": None},
    }


def thread_fields(comments: list[dict], node_id: str) -> dict:
    """`thread` of a pull_request_review_thread event: its node id and its comments."""
    return {"node_id": node_id, "comments": comments}
