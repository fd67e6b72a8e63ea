"""/api/prs: read the enrolled PRs; POST enrolls one (bearer server.api_token)."""

from __future__ import annotations

import contextlib
import hmac
import json
from dataclasses import replace
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from bot.config import ConvergenceConfig
from bot.engine import repoconfig, stacks
from bot.engine.dispatch import requeue
from bot.engine.read import asked_reviewers
from bot.engine.submit import SubmitOptions, submit_pr
from bot.github.errors import GitHubError
from bot.rules.merge import DependencyError, explicit_dependencies
from bot.rules.model import MAX_ROUNDS
from bot.surfaces.views import ListQuery, QueryError, list_page, pr_detail
from storage import prs
from storage.keys import PrKey, PrKeyError, parse_pr_key

SUBMISSION_FIELDS = frozenset({"pr", "max_rounds", "no_merge", "depends_on", "stack"})
EXPECTED = ('expected JSON {"pr": "owner/repo#N"}, optionally with "max_rounds" (a number), '
            '"no_merge" (true or false), "depends_on" (a list of "owner/repo#N" or "#N") and "stack" '
            '(true: the PRs it is stacked on too)')


async def list_prs(request: Request) -> JSONResponse:
    """A page of PRs (`ListQuery`: `scope`, `status`, `repo`, `limit`, `cursor`), as a JSON list;
    `Link: <...>; rel="next"` names the next page while there is one, and `X-Total-Count` how
    many PRs the filters match."""
    rt = request.app.state.runtime
    try:
        q = ListQuery.of(request.query_params)
    except QueryError as e:
        return JSONResponse({"error": str(e)}, status_code=400)
    rows, page = await list_page(rt.db, q, asked_reviewers(rt.config))
    headers = {"X-Total-Count": str(page.total)}
    if page.next is not None:
        headers["Link"] = f'<{request.url.include_query_params(cursor=page.next.text())}>; rel="next"'
    return JSONResponse(rows, headers=headers)


def path_key(request: Request) -> PrKey:
    """The PR a `/{owner}/{repo}/{number}` path names; PrKeyError says why it names none. The
    number is matched as text, so `x` or `0` get this one-line error rather than the router's."""
    p = request.path_params
    if not p["number"].isdigit():
        raise PrKeyError(f"malformed PR number {p['number']!r}: expected a number from 1")
    return parse_pr_key(f"{p['owner']}/{p['repo']}#{p['number']}")


async def get_pr(request: Request) -> JSONResponse:
    """The PR's full detail (`pr_detail`); the list keeps the summary shape."""
    try:
        key = path_key(request)
    except PrKeyError as e:
        return JSONResponse({"error": str(e)}, status_code=400)
    rt = request.app.state.runtime
    view = await prs.get(rt.db, key)
    if view is None:
        return JSONResponse({"error": f"{key} is not enrolled"}, status_code=404)
    return JSONResponse(await pr_detail(rt.db, view, rt.config.budget, asked_reviewers(rt.config)))


async def post_pr(request: Request) -> JSONResponse:
    rt = request.app.state.runtime
    token = rt.config.server.api_token.get_secret_value()
    given = request.headers.get("authorization", "")
    if not token or not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
        return JSONResponse({"error": "a valid bearer token is required"}, status_code=401)
    try:
        body = json.loads(await request.body())
    except (ValueError, RecursionError):  # not JSON, not UTF-8, a 4,300-digit integer, too deep
        body = None
    try:
        key, opts = submission(body, rt.config.convergence)
    except SubmissionError as e:
        return JSONResponse({"error": str(e)}, status_code=400)
    if "max_rounds" not in body:
        # No count given: the repository's (`.github/convergebot.toml`), as `/converge` takes it;
        # the global one when GitHub cannot be asked now.
        with contextlib.suppress(GitHubError):
            repo = await repoconfig.effective_config(rt, key.full_repo)
            opts = replace(opts, max_rounds=repo.convergence.max_rounds)
    if body.get("stack") is True:  # the PRs it is stacked on too (docs/stacks.md)
        try:
            await stacks.enroll_below(rt, key, opts)
        except GitHubError as e:
            return JSONResponse({"error": f"the PRs it is stacked on could not be read from GitHub: {e}"},
                                status_code=503)
    result = await submit_pr(rt.db, key, opts)
    if result.outcome == "started":
        async with rt.db.session() as s:
            await requeue(s, key, f"api:{result.process_key}", once=True)
        rt.wake_workers()
    status = 201 if result.outcome == "started" else 200
    return JSONResponse({"pr_key": result.pr_key, "outcome": result.outcome,
                         "process_key": result.process_key}, status_code=status)


class SubmissionError(ValueError):
    """A POST /api/prs body the CLI's `submit` would refuse too; the message says why."""


def submission(body: Any, convergence: ConvergenceConfig) -> tuple[PrKey, SubmitOptions]:
    """The PR and options of a POST /api/prs body, checked as `convergebot submit` checks its
    arguments: a well-formed key, max_rounds from 1 to MAX_ROUNDS, a boolean no_merge, a list
    of well-formed dependency keys none of which is the PR, no other field."""
    if not isinstance(body, dict) or not isinstance(body.get("pr"), str):
        raise SubmissionError(EXPECTED)
    unknown = sorted(set(body) - SUBMISSION_FIELDS)
    if unknown:
        raise SubmissionError(f"unknown field(s) {', '.join(unknown)}: {EXPECTED}")
    try:
        key = parse_pr_key(body["pr"])
    except PrKeyError as e:
        raise SubmissionError(str(e)) from None
    max_rounds = body.get("max_rounds", convergence.max_rounds)
    if type(max_rounds) is not int or not 1 <= max_rounds <= MAX_ROUNDS:
        raise SubmissionError(f"max_rounds must be an integer from 1 to {MAX_ROUNDS}")
    no_merge = body.get("no_merge", False)
    if not isinstance(no_merge, bool):
        raise SubmissionError("no_merge must be true or false")
    if not isinstance(body.get("stack", False), bool):
        raise SubmissionError("stack must be true or false")
    given = body.get("depends_on", [])
    if not isinstance(given, list) or not all(isinstance(k, str) for k in given):
        raise SubmissionError('depends_on must be a list of PR keys ("owner/repo#N" or "#N")')
    try:
        depends_on = explicit_dependencies(key, given)
    except DependencyError as e:
        raise SubmissionError(str(e)) from None
    return key, SubmitOptions(max_rounds=max_rounds, converge_only=no_merge or not convergence.merge,
                              submitted_by="api", depends_on=depends_on)
