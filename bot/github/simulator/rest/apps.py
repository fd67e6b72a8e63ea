"""GitHub App installation tokens, so a bot configured with App auth can run against us.

The app JWT is not verified (the simulator holds no app keys): any three-part bearer token is
taken as one. The installation token handed out then acts as the configured token user.
"""

from __future__ import annotations

import secrets
from datetime import timedelta

from ..errors import ApiError
from ..gateway import ApiRequest, Gateway, Reply, token_of
from ..ids import iso, now
from ..shapes.repos import repository


async def create_installation_token(sim, req: ApiRequest) -> Reply:
    jwt = token_of(req.request) or ""
    if jwt.count(".") != 2:
        raise ApiError(401, "A JSON web token could not be decoded")
    token = f"ghs_{secrets.token_hex(18)}"
    sim.issued_tokens.add(token)
    return Reply({"token": token, "expires_at": iso(now() + timedelta(hours=1)),
                  "permissions": {"contents": "write", "pull_requests": "write",
                                  "checks": "write", "issues": "write", "metadata": "read"},
                  "repository_selection": "all"}, status=201)


async def installation_repositories(sim, req: ApiRequest) -> Reply:
    """GET /installation/repositories: the installation reaches every repository (`all`)."""
    repos = sorted(sim.state.repos.values(), key=lambda r: r.id)
    page, headers = req.page(repos)
    return Reply({"total_count": len(repos), "repository_selection": "all",
                  "repositories": [repository(sim.ctx, r) for r in page]}, headers=headers)


def routes(gw: Gateway):
    return [gw.route("POST", "/app/installations/{installation_id}/access_tokens",
                     create_installation_token, counted=False, app_jwt=True),
            gw.route("GET", "/installation/repositories", installation_repositories)]
