"""Comparing two commits: GET .../compare/{base}...{head}, from real git."""

from __future__ import annotations

from typing import Protocol

from starlette.routing import Route

from ..errors import NotFound
from ..gateway import ApiRequest, Gateway, Reply
from ..gitstore import Comparison, FileChange, GitStore
from ..shapes import RenderContext
from ..shapes.commits import commit
from ..state import Repo

# GitHub lists at most this many commits in a comparison (`total_commits` counts them all).
MAX_COMMITS = 250


class CompareModel(Protocol):
    """What the compare endpoint uses of the model (the Simulator is one)."""

    git: GitStore  # refs resolved
    ctx: RenderContext

    def repo(self, full_name: str) -> Repo: ...

    async def compare(self, repo: Repo, base: str, head: str) -> Comparison | None: ...


async def compare(sim: CompareModel, req: ApiRequest) -> Reply:
    """`basehead` is `BASE...HEAD`, each a branch, `heads/...` or a commit sha of this
    repository. `files` are what HEAD changed since the two parted (the merge base)."""
    repo = sim.repo(req.repo)
    basehead = req.params["basehead"]
    base_ref, sep, head_ref = basehead.partition("...")
    if not sep or not base_ref or not head_ref:
        raise NotFound(basehead)
    base = await sim.git.resolve(repo.git_dir, base_ref)
    head = await sim.git.resolve(repo.git_dir, head_ref)
    if base is None or head is None:
        raise NotFound(basehead)
    found: Comparison | None = await sim.compare(repo, base, head)
    if found is None:
        raise NotFound(f"no common ancestor between {base_ref} and {head_ref}")
    ctx, name = sim.ctx, repo.full_name
    status = ("identical" if not found.ahead_by and not found.behind_by
              else "ahead" if not found.behind_by
              else "behind" if not found.ahead_by else "diverged")
    html = ctx.html(f"{name}/compare/{basehead}")
    return Reply({
        "url": ctx.api(f"repos/{name}/compare/{basehead}"),
        "html_url": html,
        "permalink_url": ctx.html(f"{name}/compare/{repo.owner}:{base}...{repo.owner}:{head}"),
        "diff_url": f"{html}.diff",
        "patch_url": f"{html}.patch",
        "base_commit": commit(ctx, repo, found.base),
        "merge_base_commit": commit(ctx, repo, found.merge_base),
        "status": status,
        "ahead_by": found.ahead_by,
        "behind_by": found.behind_by,
        "total_commits": found.ahead_by,
        "commits": [commit(ctx, repo, c) for c in found.commits[:MAX_COMMITS]],
        "files": [_file(sim, repo, head, f) for f in found.files],
    })


def _file(sim: CompareModel, repo: Repo, head: str, f: FileChange) -> dict:
    name = repo.full_name
    return {"sha": f.blob, "filename": f.path, "status": f.status,
            "additions": f.additions, "deletions": f.deletions,
            "changes": f.additions + f.deletions,
            "blob_url": sim.ctx.html(f"{name}/blob/{head}/{f.path}"),
            "raw_url": sim.ctx.html(f"{name}/raw/{head}/{f.path}"),
            "contents_url": sim.ctx.api(f"repos/{name}/contents/{f.path}?ref={head}")}


def routes(gw: Gateway[CompareModel]) -> list[Route]:
    return [gw.route("GET", "/repos/{owner}/{repo}/compare/{basehead}", compare)]
