"""A Simulator's web face, built by whoever serves it: GitHub's API at the root, the control API
under /_sim/."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from . import control, gql, rest
from .errors import NotFound
from .gateway import ApiRequest, Gateway, Reply

if TYPE_CHECKING:
    from .simulator import Simulator

UNMATCHED = "{unmatched}"
_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"]


def build_app(sim: Simulator) -> Starlette:
    """Each handler module names what it needs of the model in a protocol; building the
    routes from the Simulator here is where mypy checks that the Simulator has it."""
    gateway = Gateway(sim, sim)

    async def unknown_api(model: object, req: ApiRequest) -> Reply:
        raise NotFound(req.request.url.path)

    async def fallback(request: Request) -> Response:
        if request.url.path.startswith("/_sim/"):
            return Response(json.dumps({"message": "Not Found"}), 404,
                            media_type="application/json")
        # Unknown GitHub paths are counted too: a client calling a wrong URL shows up in counters.
        return await gateway.handle(request, request.method, UNMATCHED, unknown_api, "core", True)

    routes = [*control.routes(sim), *rest.routes(gateway), *gql.routes(gateway),
              Route("/{path:path}", fallback, methods=_METHODS)]
    return Starlette(routes=routes)
