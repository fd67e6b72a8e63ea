"""GitHub REST endpoints, one module per resource family."""

from __future__ import annotations

from typing import Protocol

from starlette.routing import Route

from ..gateway import Gateway
from . import apps, checks, compare, hooks, issues, pulls, repos, reviews


class RestModel(apps.AppsModel, checks.ChecksModel, compare.CompareModel, hooks.HooksModel,
                issues.IssuesModel, pulls.PullsModel, repos.ReposModel, reviews.ReviewsModel,
                Protocol):
    """Everything the REST handlers use of the model: what each module's protocol names."""


def routes(gateway: Gateway[RestModel]) -> list[Route]:
    # Called one by one, not in a loop over the modules, so that mypy checks each call.
    by_name = [*repos.routes(gateway), *pulls.routes(gateway), *reviews.routes(gateway),
               *issues.routes(gateway), *checks.routes(gateway), *apps.routes(gateway),
               *hooks.routes(gateway), *compare.routes(gateway)]
    return by_name + gateway.by_id_routes()  # /repositories/{repository_id}/...: next links
