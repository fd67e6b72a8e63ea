"""Repository, git ref, file contents, collaborator permission and rate-limit endpoints."""

from __future__ import annotations

import base64
import time
from typing import Protocol

from starlette.routing import Route

from ..errors import NotFound, Unprocessable
from ..gateway import ApiRequest, Gateway, Reply, token_of
from ..gitstore import GitStore
from ..ratelimit import RateLimiter
from ..shapes import RenderContext
from ..shapes.repos import full_repository
from ..shapes.users import user
from ..state import Repo, State

# What the legacy `permission` field says for each role.
_LEGACY = {"admin": "admin", "maintain": "write", "write": "write", "triage": "read",
           "read": "read"}


class ReposModel(Protocol):
    """What the repository, ref, contents, permission and rate-limit endpoints use of the
    model (the Simulator is one)."""

    state: State  # collaborators' roles
    git: GitStore  # refs, blobs and trees
    ctx: RenderContext
    rate_limits: RateLimiter  # GET /rate_limit reads the buckets

    def repo(self, full_name: str) -> Repo: ...

    async def delete_branch(self, repo_name: str, branch: str, *, actor: str | None = None) -> None: ...


async def get_repo(sim: ReposModel, req: ApiRequest) -> Reply:
    return Reply(full_repository(sim.ctx, sim.repo(req.repo)))


async def get_ref(sim: ReposModel, req: ApiRequest) -> Reply:
    """GET .../git/ref/heads/{branch}: what git has now (the ref cache re-checks the ref files
    on every read, so a push is seen at once)."""
    repo = sim.repo(req.repo)
    ref = req.params["ref"]
    if not ref.startswith("heads/"):
        raise NotFound(ref)
    sha = await sim.git.branch_sha(repo.git_dir, ref.removeprefix("heads/"))
    if sha is None:
        raise NotFound(ref)
    api = sim.ctx.api(f"repos/{repo.full_name}")
    return Reply({"ref": f"refs/{ref}", "node_id": f"REF_{sha[:16]}",
                  "url": f"{api}/git/refs/{ref}",
                  "object": {"sha": sha, "type": "commit", "url": f"{api}/git/commits/{sha}"}})


async def get_contents(sim: ReposModel, req: ApiRequest) -> Reply:
    repo = sim.repo(req.repo)
    path = req.params["path"].strip("/")
    ref = req.query.get("ref") or repo.default_branch
    sha = await sim.git.resolve(repo.git_dir, ref)
    if sha is None:
        raise NotFound(ref)
    api = sim.ctx.api(f"repos/{repo.full_name}")
    blob = await sim.git.read_blob(repo.git_dir, sha, path)
    if blob is None:
        entries = await sim.git.list_dir(repo.git_dir, sha, path)
        if not entries:
            raise NotFound(path)
        return Reply([_entry(sim, repo, api, ref, kind, blob_sha, p, size)
                      for kind, blob_sha, p, size in entries])
    blob_sha, content = blob
    encoded = base64.encodebytes(content).decode()  # GitHub wraps base64 lines too
    return Reply({**_entry(sim, repo, api, ref, "file", blob_sha, path, len(content)),
                  "encoding": "base64", "content": encoded})


def _entry(sim: ReposModel, repo: Repo, api: str, ref: str, kind: str, sha: str, path: str,
           size: int) -> dict:
    url = f"{api}/contents/{path}?ref={ref}"
    html = sim.ctx.html(f"{repo.full_name}/blob/{ref}/{path}")
    git = f"{api}/git/{'blobs' if kind == 'file' else 'trees'}/{sha}"
    return {"type": kind, "size": size, "name": path.rsplit("/", 1)[-1], "path": path,
            "sha": sha, "url": url, "git_url": git, "html_url": html,
            "download_url": sim.ctx.html(f"raw/{repo.full_name}/{ref}/{path}") if kind == "file" else None,
            "_links": {"self": url, "git": git, "html": html}}


async def get_permission(sim: ReposModel, req: ApiRequest) -> Reply:
    """Unknown users get `none`; `permission` is the legacy field (maintain reads as write)."""
    repo = sim.repo(req.repo)
    login = req.params["username"]
    role = sim.state.role(repo, login)
    data = user(sim.ctx, login)
    if role:
        data["permissions"] = {"admin": role == "admin",
                               "maintain": role in ("admin", "maintain"),
                               "push": role in ("admin", "maintain", "write"),
                               "triage": role != "read", "pull": True}
        data["role_name"] = role
    else:
        data["permissions"] = {k: False for k in ("admin", "maintain", "push", "triage", "pull")}
        data["role_name"] = "none"
    return Reply({"permission": _LEGACY.get(role or "", "none"), "role_name": role or "none",
                  "user": data})


async def get_rate_limit(sim: ReposModel, req: ApiRequest) -> Reply:
    key = token_of(req.request) or "anonymous"
    resources = {name: sim.rate_limits.bucket(name, key).to_dict()
                 for name in ("core", "graphql")}
    resources["search"] = {"limit": 30, "remaining": 30, "reset": int(time.time()) + 60,
                           "used": 0}
    return Reply({"resources": resources, "rate": resources["core"]})


async def delete_ref(sim: ReposModel, req: ApiRequest) -> Reply:
    """DELETE .../git/refs/heads/{branch} (the PRs it bases or heads: `delete_branch`)."""
    ref = req.params["ref"]
    if not ref.startswith("heads/"):
        raise Unprocessable("Reference does not exist", "ref")
    await sim.delete_branch(req.repo, ref.removeprefix("heads/"), actor=req.actor)
    return Reply(None, status=204)


def routes(gw: Gateway[ReposModel]) -> list[Route]:
    return [
        gw.route("GET", "/repos/{owner}/{repo}", get_repo),
        gw.route("GET", "/repos/{owner}/{repo}/git/ref/{ref}", get_ref),
        gw.route("DELETE", "/repos/{owner}/{repo}/git/refs/{ref}", delete_ref),
        gw.route("GET", "/repos/{owner}/{repo}/contents/{path}", get_contents),
        gw.route("GET", "/repos/{owner}/{repo}/collaborators/{username}/permission",
                 get_permission),
        gw.route("GET", "/rate_limit", get_rate_limit, counted=False),
    ]
