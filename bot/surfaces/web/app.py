"""The Starlette application of `serve`."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from bot.intake.webhook import WebhookEndpoint
from bot.runtime.context import Runtime
from bot.surfaces.web import api, health, openapi
from bot.surfaces.web.dashboard import dashboard, pr_page


async def http_error(request: Request, exc: HTTPException) -> Response:
    """Under /api, the router's own refusals (no such path, a method not allowed) answer in
    the API's one error shape, `{"error": ...}`, like its handlers' do."""
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": f"{exc.detail}: {request.method} {request.url.path}"},
                            status_code=exc.status_code, headers=exc.headers)
    return PlainTextResponse(exc.detail, status_code=exc.status_code, headers=exc.headers)


class _App(Starlette):
    """Starlette, with POST /webhook answered before its middleware and routing: the endpoint
    is a plain ASGI app (`WebhookEndpoint`), the server's one hot path. Anything else, a
    /webhook under a root path or with another method included, goes through Starlette, whose
    route for /webhook is the same endpoint."""

    webhook: WebhookEndpoint

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"] == "/webhook" and scope["method"] == "POST" \
                and not scope.get("root_path"):
            await self.webhook(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


def build_app(rt: Runtime) -> Starlette:
    webhook = WebhookEndpoint(rt)
    # Starlette calls a handler only with the exception class it is registered for, but types
    # every handler as taking any Exception, which a handler of a subclass is not (a callable's
    # parameters are contravariant; Kludex/starlette#1142, #2403).
    app = _App(exception_handlers={HTTPException: http_error}, routes=[  # type: ignore[dict-item]
        Route("/", dashboard),
        Route("/prs/{owner}/{repo}/{number}", pr_page),
        Route("/webhook", webhook, methods=["POST"]),
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
    app.webhook = webhook
    return app
