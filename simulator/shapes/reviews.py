"""Reviews and review (diff) comments."""

from __future__ import annotations

from ..ids import iso
from ..state import Repo, Review, ReviewComment
from .context import RenderContext
from .reactions import rollup
from .users import user


def review(ctx: RenderContext, repo: Repo, r: Review) -> dict:
    pull = ctx.api(f"repos/{repo.full_name}/pulls/{r.number}")
    html = ctx.html(f"{repo.full_name}/pull/{r.number}#pullrequestreview-{r.id}")
    return {
        "id": r.id,
        "node_id": r.node_id,
        "user": user(ctx, r.user),
        "body": r.body,
        "state": r.state,
        "html_url": html,
        "pull_request_url": pull,
        "author_association": ctx.association(repo, r.user),
        "_links": {"html": {"href": html}, "pull_request": {"href": pull}},
        "submitted_at": iso(r.submitted_at),
        "commit_id": r.commit_id,
    }


def review_comment(ctx: RenderContext, repo: Repo, c: ReviewComment, *, head: str,
                   outdated: bool) -> dict:
    """A diff comment; `line`/`position` go null once it is outdated, as on GitHub."""
    url = ctx.api(f"repos/{repo.full_name}/pulls/comments/{c.id}")
    pull = ctx.api(f"repos/{repo.full_name}/pulls/{c.number}")
    html = ctx.html(f"{repo.full_name}/pull/{c.number}#discussion_r{c.id}")
    data = {
        "url": url,
        "pull_request_review_id": c.review_id,
        "id": c.id,
        "node_id": c.node_id,
        "diff_hunk": f"@@ -{c.line},1 +{c.line},1 @@",
        "path": c.path,
        "position": None if outdated else c.line,
        "original_position": c.line,
        "commit_id": c.commit_id if outdated else head,
        "original_commit_id": c.commit_id,
        "user": user(ctx, c.user),
        "body": c.body,
        "created_at": iso(c.created_at),
        "updated_at": iso(c.updated_at),
        "html_url": html,
        "pull_request_url": pull,
        "author_association": ctx.association(repo, c.user),
        "_links": {"self": {"href": url}, "html": {"href": html}, "pull_request": {"href": pull}},
        "start_line": None,
        "original_start_line": None,
        "start_side": None,
        "line": None if outdated else c.line,
        "original_line": c.line,
        "side": "RIGHT",
        "subject_type": "line",
        "reactions": rollup(url, c.reactions),
    }
    if c.in_reply_to_id is not None:
        data["in_reply_to_id"] = c.in_reply_to_id
    return data
