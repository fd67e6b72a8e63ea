"""/api/prs: read the enrolled PRs; POST enrolls one (bearer server.api_token)."""

from __future__ import annotations

import hmac
import json

from starlette.requests import Request
from starlette.responses import JSONResponse

from bot.enrollment import SubmitOptions, submit_pr
from bot.prkey import PrKeyError, parse_pr_key
from bot.views import pr_json
from storage import jobs, prs


async def list_prs(request: Request) -> JSONResponse:
    views = await prs.list_all(request.app.state.runtime.db)
    return JSONResponse([pr_json(v) for v in views])


async def get_pr(request: Request) -> JSONResponse:
    p = request.path_params
    try:
        key = parse_pr_key(f"{p['owner']}/{p['repo']}#{p['number']}")
    except PrKeyError as e:
        return JSONResponse({"error": str(e)}, status_code=400)
    view = await prs.get(request.app.state.runtime.db, str(key))
    if view is None:
        return JSONResponse({"error": f"{key} is not enrolled"}, status_code=404)
    return JSONResponse(pr_json(view))


async def post_pr(request: Request) -> JSONResponse:
    rt = request.app.state.runtime
    token = rt.config.server.api_token.get_secret_value()
    given = request.headers.get("authorization", "")
    if not token or not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
        return JSONResponse({"error": "a valid bearer token is required"}, status_code=401)
    try:
        body = json.loads(await request.body())
        key = parse_pr_key(body["pr"]) if isinstance(body, dict) else None
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError):
        return JSONResponse({"error": 'expected JSON {"pr": "owner/repo#N"}'}, status_code=400)
    except PrKeyError as e:
        return JSONResponse({"error": str(e)}, status_code=400)
    if key is None:
        return JSONResponse({"error": 'expected JSON {"pr": "owner/repo#N"}'}, status_code=400)
    max_rounds = body.get("max_rounds", rt.config.convergence.max_rounds)
    if not isinstance(max_rounds, int) or isinstance(max_rounds, bool) or max_rounds < 1:
        return JSONResponse({"error": "max_rounds must be a positive integer"}, status_code=400)
    result = await submit_pr(rt.db, key, SubmitOptions(
        max_rounds=max_rounds,
        converge_only=bool(body.get("no_merge")) or not rt.config.convergence.merge,
        submitted_by="api",
    ))
    if result.outcome == "started":
        await jobs.enqueue(rt.db, "sync", f"sync:{key}:api:{result.process_key}", pr_key=str(key))
        rt.wake_workers()
    status = 201 if result.outcome == "started" else 200
    return JSONResponse({"pr_key": result.pr_key, "outcome": result.outcome,
                         "process_key": result.process_key}, status_code=status)
