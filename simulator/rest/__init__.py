"""GitHub REST endpoints, one module per resource family."""

from __future__ import annotations

from starlette.routing import Route

from ..gateway import Gateway
from . import apps, checks, compare, hooks, issues, pulls, repos, reviews


def routes(gateway: Gateway) -> list[Route]:
    by_name = [route for module in (repos, pulls, reviews, issues, checks, apps, hooks, compare)
               for route in module.routes(gateway)]
    return by_name + gateway.by_id_routes()  # /repositories/{repository_id}/...: next links
