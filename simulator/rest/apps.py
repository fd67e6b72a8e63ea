"""GitHub App endpoints, so a bot configured with App auth can run against us.

The app JWT is not verified (the simulator holds no app keys): any three-part bearer token is
taken as one. The installation token handed out then acts as the configured token user, on the
repositories its installation reaches (see installations.py; by default, every one).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Protocol

from starlette.routing import Route

from ..errors import ApiError, NotFound
from ..gateway import ApiRequest, Gateway, Reply, token_of
from ..ids import iso, now
from ..installations import Installation, Installations
from ..shapes import RenderContext
from ..shapes.repos import repository
from ..state import State


class AppsModel(Protocol):
    """What the App endpoints read of the model (the Simulator is one)."""

    installations: Installations
    state: State  # the repositories an installation reaches
    ctx: RenderContext
    token_user: str  # the default installation's account when there is no repository


def _require_jwt(req: ApiRequest) -> None:
    jwt = token_of(req.request) or ""
    if jwt.count(".") != 2:
        raise ApiError(401, "A JSON web token could not be decoded")


async def create_installation_token(sim: AppsModel, req: ApiRequest) -> Reply:
    _require_jwt(req)
    installation = sim.installations.get(int(req.params["installation_id"]))
    if installation is None:
        raise NotFound(f"installation {req.params['installation_id']}")
    token = sim.installations.mint(installation)
    return Reply({"token": token, "expires_at": iso(now() + timedelta(hours=1)),
                  "permissions": {"contents": "write", "pull_requests": "write",
                                  "checks": "write", "issues": "write", "metadata": "read"},
                  "repository_selection": "all"}, status=201)


def _account(sim: AppsModel, installation: Installation) -> str:
    """The account's login: the installation's owner, or (the default installation) the owner
    of the first repository."""
    if installation.owner:
        return installation.owner
    first = min(sim.state.repos.values(), key=lambda r: r.id, default=None)
    return first.full_name.split("/")[0] if first else sim.token_user


async def list_installations(sim: AppsModel, req: ApiRequest) -> Reply:
    """GET /app/installations (as the App)."""
    _require_jwt(req)
    found = sim.installations.all()
    page, headers = req.page(found)
    return Reply([sim.installations.shape(i, _account(sim, i)) for i in page], headers=headers)


async def repo_installation(sim: AppsModel, req: ApiRequest) -> Reply:
    """GET /repos/{owner}/{repo}/installation (as the App): 404 where the App is not installed."""
    _require_jwt(req)
    owner, name = req.params["owner"], req.params["repo"]
    sim.state.repo(owner, name)  # 404 for a repository that does not exist
    installation = sim.installations.for_owner(owner)
    if installation is None:
        raise NotFound(f"installation for {owner}/{name}")
    return Reply(sim.installations.shape(installation, _account(sim, installation)))


async def installation_repositories(sim: AppsModel, req: ApiRequest) -> Reply:
    """GET /installation/repositories: the repositories the token's installation reaches."""
    installation = sim.installations.of_token(token_of(req.request))
    repos = sorted((r for r in sim.state.repos.values()
                    if installation is None or installation.reaches(r.full_name.split("/")[0])),
                   key=lambda r: r.id)
    page, headers = req.page(repos)
    return Reply({"total_count": len(repos), "repository_selection": "all",
                  "repositories": [repository(sim.ctx, r) for r in page]}, headers=headers)


def routes(gw: Gateway[AppsModel]) -> list[Route]:
    return [gw.route("POST", "/app/installations/{installation_id}/access_tokens",
                     create_installation_token, counted=False, app_jwt=True),
            gw.route("GET", "/app/installations", list_installations, counted=False, app_jwt=True),
            gw.route("GET", "/repos/{owner}/{repo}/installation", repo_installation,
                     counted=False, app_jwt=True),
            gw.route("GET", "/installation/repositories", installation_repositories)]
