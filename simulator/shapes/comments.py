"""Issue comments (the PR's conversation tab)."""

from __future__ import annotations

from ..ids import iso
from ..state import IssueComment, Repo
from .context import RenderContext
from .reactions import rollup
from .users import user


def issue_comment(ctx: RenderContext, repo: Repo, c: IssueComment) -> dict:
    url = ctx.api(f"repos/{repo.full_name}/issues/comments/{c.id}")
    return {
        "id": c.id,
        "node_id": c.node_id,
        "url": url,
        "html_url": ctx.html(f"{repo.full_name}/pull/{c.number}#issuecomment-{c.id}"),
        "body": c.body,
        "user": user(ctx, c.user),
        "created_at": iso(c.created_at),
        "updated_at": iso(c.updated_at),
        "issue_url": ctx.api(f"repos/{repo.full_name}/issues/{c.number}"),
        "author_association": ctx.association(repo, c.user),
        "performed_via_github_app": None,
        "reactions": rollup(url, c.reactions),
    }
