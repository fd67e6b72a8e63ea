"""The Starlette application of `serve`."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.routing import Route

from bot.runtime import Runtime

from . import api, health
from .dashboard import dashboard
from .webhook import receive_webhook


def build_app(rt: Runtime) -> Starlette:
    app = Starlette(routes=[
        Route("/", dashboard),
        Route("/webhook", receive_webhook, methods=["POST"]),
        Route("/livez", health.livez),
        Route("/readyz", health.readyz),
        Route("/metrics", health.metrics),
        Route("/api/prs", api.list_prs, methods=["GET"]),
        Route("/api/prs", api.post_pr, methods=["POST"]),
        Route("/api/prs/{owner}/{repo}/{number:int}", api.get_pr),
    ])
    app.state.runtime = rt
    return app
