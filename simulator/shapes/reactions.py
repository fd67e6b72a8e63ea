"""Reactions and the reaction roll-up embedded in comments."""

from __future__ import annotations

from ..ids import iso
from ..state import REACTIONS, Reaction
from .context import RenderContext
from .users import user


def reaction(ctx: RenderContext, r: Reaction) -> dict:
    return {"id": r.id, "node_id": r.node_id, "user": user(ctx, r.user), "content": r.content,
            "created_at": iso(r.created_at)}


def rollup(url: str, reactions: list[Reaction]) -> dict:
    counts = {content: sum(1 for r in reactions if r.content == content) for content in REACTIONS}
    return {"url": f"{url}/reactions", "total_count": len(reactions), **counts}
