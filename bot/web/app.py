"""The Starlette application of `serve`."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from bot.runtime import Runtime

from . import api, health, openapi
from .dashboard import dashboard, pr_page
from .webhook import receive_webhook


async def http_error(request: Request, exc: HTTPException) -> Response:
    """Under /api, the router's own refusals (no such path, a method not allowed) answer in
    the API's one error shape, `{"error": ...}`, like its handlers' do."""
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": f"{exc.detail}: {request.method} {request.url.path}"},
                            status_code=exc.status_code, headers=exc.headers)
    return PlainTextResponse(exc.detail, status_code=exc.status_code, headers=exc.headers)


def build_app(rt: Runtime) -> Starlette:
    app = Starlette(exception_handlers={HTTPException: http_error}, routes=[
        Route("/", dashboard),
        Route("/prs/{owner}/{repo}/{number}", pr_page),
        Route("/webhook", receive_webhook, methods=["POST"]),
        Route("/livez", health.livez),
        Route("/readyz", health.readyz),
        Route("/metrics", health.metrics),
        Route("/api/prs", api.list_prs, methods=["GET"]),
        Route("/api/prs", api.post_pr, methods=["POST"]),
        # The number is matched as text: `x` or `0` get the handler's one-line 400, not a 404.
        Route("/api/prs/{owner}/{repo}/{number}", api.get_pr),
        Route("/api/openapi.json", openapi.openapi),
    ])
    app.state.runtime = rt
    return app
