"""The App's webhook delivery log (`/app/hook/deliveries`) and redelivery, as the App's JWT.

Listed newest first with cursor pagination (`Link: <...&cursor=v1_ID>; rel="next"`), as GitHub
pages this log; an installation token is refused, as GitHub refuses it. Not counted against the
installation's rate limit: the App's JWT has a budget of its own.
"""

from __future__ import annotations

from ..errors import ApiError, NotFound, Unprocessable
from ..gateway import ApiRequest, Gateway, Reply, token_of
from ..pagination import DEFAULT_PER_PAGE, MAX_PER_PAGE

CURSOR_PREFIX = "v1_"


def _require_jwt(req: ApiRequest) -> None:
    if (token_of(req.request) or "").count(".") != 2:
        raise ApiError(401, "A JSON web token could not be decoded")


def _entry(sim, req: ApiRequest):
    raw = req.params["delivery_id"]
    entry = sim.webhooks.log.get(int(raw)) if raw.isdigit() else None
    if entry is None:
        raise NotFound(f"delivery {raw}")
    return entry


async def list_deliveries(sim, req: ApiRequest) -> Reply:
    _require_jwt(req)
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
    entries, next_before = sim.webhooks.log.page(before=before, per_page=per_page)
    headers = {}
    if next_before is not None:
        url = req.request.url.include_query_params(per_page=per_page,
                                                   cursor=f"{CURSOR_PREFIX}{next_before}")
        headers["Link"] = f'<{url}>; rel="next"'
    return Reply([e.item() for e in entries], headers=headers)


async def get_delivery(sim, req: ApiRequest) -> Reply:
    _require_jwt(req)
    return Reply(_entry(sim, req).full())


async def redeliver(sim, req: ApiRequest) -> Reply:
    _require_jwt(req)
    sim.webhooks.redeliver(_entry(sim, req).id)
    return Reply({}, status=202)


def routes(gw: Gateway):
    return [gw.route("GET", "/app/hook/deliveries", list_deliveries, counted=False, app_jwt=True),
            gw.route("GET", "/app/hook/deliveries/{delivery_id}", get_delivery, counted=False,
                     app_jwt=True),
            gw.route("POST", "/app/hook/deliveries/{delivery_id}/attempts", redeliver,
                     counted=False, app_jwt=True)]
