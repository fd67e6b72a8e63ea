"""Webhook delivery logs and redelivery: the App's own (`/app/hook/deliveries`, as the App's
JWT) and a repository's or an organisation's webhook (`/repos/{owner}/{repo}/hooks/{hook_id}/
deliveries`, `/orgs/{org}/hooks/{hook_id}/deliveries`, with a token).

The simulator has one webhook (`sim.webhooks`, its id `hook_id`): with the App it is the App's,
with a token it stands for a repository's or an organisation's hook, and each of those logs
lists only the entries of its own repositories. Listed newest first with cursor pagination
(`Link: <...&cursor=v1_ID>; rel="next"`), as GitHub pages these logs. The App's log refuses a
token and is not counted against the installation's rate limit (the JWT has a budget of its
own); a hook's log is read with the token and counted, as GitHub counts it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from starlette.routing import Route

from ..errors import ApiError, NotFound, Unprocessable
from ..gateway import ApiRequest, Gateway, Reply, token_of
from ..hooklog import LogEntry
from ..pagination import DEFAULT_PER_PAGE, MAX_PER_PAGE
from ..state import State
from ..webhooks import WebhookDispatcher

CURSOR_PREFIX = "v1_"

Scope = Callable[[LogEntry], bool] | None


class HooksModel(Protocol):
    """What the delivery-log endpoints use of the model (the Simulator is one)."""

    webhooks: WebhookDispatcher  # its hook id, its log, redelivery
    state: State  # the repositories a hook's log is scoped to


def _require_jwt(req: ApiRequest) -> None:
    if (token_of(req.request) or "").count(".") != 2:
        raise ApiError(401, "A JSON web token could not be decoded")


def _scope(sim: HooksModel, req: ApiRequest) -> Scope:
    """The entries the log at this URL lists: all of them for the App's, a repository's own or
    an organisation's repositories' for a hook (404 for a hook or repository that is not)."""
    params = req.params
    if "hook_id" not in params:
        _require_jwt(req)
        return None
    if params["hook_id"] != str(sim.webhooks.hook_id):
        raise NotFound(f"hook {params['hook_id']}")
    if "repo" in params:
        repo_id = sim.state.repo(params["owner"], params["repo"]).id
        return lambda e: e.repository_id == repo_id
    org = params["org"].lower()
    ids = {r.id for r in sim.state.repos.values() if r.owner.lower() == org}
    if not ids:
        raise NotFound(f"organization {params['org']}")
    return lambda e: e.repository_id in ids


def _entry(sim: HooksModel, req: ApiRequest) -> LogEntry:
    where = _scope(sim, req)
    raw = req.params["delivery_id"]
    entry = sim.webhooks.log.get(int(raw)) if raw.isdigit() else None
    if entry is None or (where is not None and not where(entry)):
        raise NotFound(f"delivery {raw}")
    return entry


async def list_deliveries(sim: HooksModel, req: ApiRequest) -> Reply:
    where = _scope(sim, req)
    try:
        per_page = min(max(int(req.query.get("per_page") or DEFAULT_PER_PAGE), 1), MAX_PER_PAGE)
    except ValueError:
        raise Unprocessable("per_page must be an integer", "per_page") from None
    cursor = req.query.get("cursor") or ""
    before = None
    if cursor:
        if not cursor.startswith(CURSOR_PREFIX) or not cursor[len(CURSOR_PREFIX):].isdigit():
            raise ApiError(400, "Invalid cursor")
        before = int(cursor[len(CURSOR_PREFIX):])
    entries, next_before = sim.webhooks.log.page(before=before, per_page=per_page, where=where)
    headers = {}
    if next_before is not None:
        url = req.request.url.include_query_params(per_page=per_page,
                                                   cursor=f"{CURSOR_PREFIX}{next_before}")
        headers["Link"] = f'<{url}>; rel="next"'
    return Reply([e.item() for e in entries], headers=headers)


async def get_delivery(sim: HooksModel, req: ApiRequest) -> Reply:
    return Reply(_entry(sim, req).full())


async def redeliver(sim: HooksModel, req: ApiRequest) -> Reply:
    sim.webhooks.redeliver(_entry(sim, req).id)
    return Reply({}, status=202)


def routes(gw: Gateway[HooksModel]) -> list[Route]:
    found = [gw.route("GET", "/app/hook/deliveries", list_deliveries, counted=False, app_jwt=True),
             gw.route("GET", "/app/hook/deliveries/{delivery_id}", get_delivery, counted=False,
                      app_jwt=True),
             gw.route("POST", "/app/hook/deliveries/{delivery_id}/attempts", redeliver,
                      counted=False, app_jwt=True)]
    for base in ("/repos/{owner}/{repo}/hooks/{hook_id}", "/orgs/{org}/hooks/{hook_id}"):
        found += [gw.route("GET", f"{base}/deliveries", list_deliveries),
                  gw.route("GET", f"{base}/deliveries/{{delivery_id}}", get_delivery),
                  gw.route("POST", f"{base}/deliveries/{{delivery_id}}/attempts", redeliver)]
    return found
