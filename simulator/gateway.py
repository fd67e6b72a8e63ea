"""The path every REST and GraphQL request takes: faults, chaos, auth, rate limit, ETag, counters.

Handlers stay plain: they take an `ApiRequest` and return a `Reply` (or raise `ApiError`);
everything GitHub does around them (401, 304, x-ratelimit-*, Retry-After) happens here once.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import structlog
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .chaos import WRITE_METHODS, ChaosDecision, RequestChaos, fault_answer, is_mutation
from .counters import DROPPED, Counters
from .errors import ApiError
from .faults import Fault, Faults, rewritten
from .installations import Installations
from .pagination import paginate
from .ratelimit import RateLimiter
from .state import State

log = structlog.get_logger("simulator.gateway")

JSON = "application/json; charset=utf-8"
# Path parameters that Starlette must convert (ids) or let span slashes (refs, file paths); the
# GitHub-style template without converters is what counters report.
CONVERTERS = {"number": "int", "repository_id": "int", "comment_id": "int", "check_run_id": "int",
              "review_id": "int", "ref": "path", "path": "path", "basehead": "path"}
# Seconds a `drop` fault holds a request open when the client never gives up.
DROP_HOLD_SECONDS = 60.0


@dataclass
class Reply:
    data: Any
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class ApiRequest:
    request: Request
    actor: str  # the login the token acts as
    repository_id: int | None = None  # the id of the repository the path names, if it names one

    @property
    def params(self) -> dict[str, Any]:
        return self.request.path_params

    @property
    def repo(self) -> str:
        return f"{self.params['owner']}/{self.params['repo']}"

    def number(self, name: str = "number") -> int:
        return int(self.params[name])

    @property
    def query(self):
        return self.request.query_params

    async def json(self) -> dict:
        raw = await self.request.body()
        if not raw:
            return {}
        try:
            data = json.loads(raw)
        except ValueError:
            raise ApiError(400, "Problems parsing JSON") from None
        if not isinstance(data, dict):
            raise ApiError(400, "Body should be a JSON object")
        return data

    def page(self, items: list) -> tuple[list, dict[str, str]]:
        chunk, link = paginate(self.request.url, items, self.repository_id)
        return chunk, ({"Link": link} if link else {})


class Front(Protocol):
    """What the pipeline consults before and after a handler runs (the Simulator is one)."""

    faults: Faults
    request_chaos: RequestChaos
    installations: Installations
    rate_limits: RateLimiter
    counters: Counters
    state: State  # the repository a path names, by name or by id
    closing: asyncio.Event  # set on shutdown: releases the requests a `drop` holds

    def token_actor(self, token: str | None) -> str | None: ...


# A handler is given the model the gateway was built with (the Simulator, for its operations),
# typed as the protocol its module declares; the gateway itself reads only the `Front`.
# Covariant: a Gateway[Simulator] is a Gateway[ChecksModel] exactly when the Simulator has
# everything ChecksModel names, so building the routes checks each handler module's needs.
M = TypeVar("M", covariant=True)
Handler = Callable[[M, ApiRequest], Awaitable[Reply]]


def _etag(body: bytes) -> str:
    return f'W/"{hashlib.sha256(body).hexdigest()[:40]}"'


def _matches(if_none_match: str | None, etag: str) -> bool:
    if not if_none_match:
        return False
    wanted = etag.removeprefix("W/")
    tags = [t.strip().removeprefix("W/") for t in if_none_match.split(",")]
    return "*" in tags or wanted in tags


def _pattern(template: str) -> str:
    for name, kind in CONVERTERS.items():
        template = template.replace(f"{{{name}}}", f"{{{name}:{kind}}}")
    return template


def token_of(request: Request) -> str | None:
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    return value.strip() if scheme.lower() in ("token", "bearer") and value.strip() else None


# A repository's routes are also served by its id, as GitHub does: its `Link: rel="next"` pages
# of a repository's listings name it so (`/repositories/8514/issues?page=2`).
BY_NAME = "/repos/{owner}/{repo}/"
BY_ID = "/repositories/{repository_id}/"


class Gateway(Generic[M]):
    def __init__(self, front: Front, model: M) -> None:
        self.front = front
        self.model = model
        # (method, template, handler, resource, counted) of each GET route under a repository
        self._by_name: list[tuple[str, str, Handler[M], str, bool]] = []

    def route(self, method: str, template: str, handler: Handler[M], resource: str = "core",
              counted: bool = True, app_jwt: bool = False) -> Route:
        """A Starlette route whose request goes through the whole GitHub pipeline.

        `counted=False` marks endpoints GitHub exempts from the rate limit (GET /rate_limit);
        `app_jwt` ones authenticate as the App (its JWT), not with an API token.
        """
        async def endpoint(request: Request) -> Response:
            return await self.handle(request, method, template, handler, resource, counted,
                                     app_jwt)

        if method == "GET" and template.startswith(BY_NAME) and not app_jwt:
            self._by_name.append((method, template, handler, resource, counted))
        return Route(_pattern(template), endpoint, methods=[method], name=f"{method} {template}")

    def by_id_routes(self) -> list[Route]:
        """`/repositories/{repository_id}/...` for each GET route registered under
        `/repos/{owner}/{repo}/...`: the same handler, the repository found by its id, and the
        request counted under the `/repositories/...` template it was sent to."""
        routes = []
        for method, template, handler, resource, counted in self._by_name:
            twin = BY_ID + template.removeprefix(BY_NAME)

            async def endpoint(request: Request, twin=twin, handler=handler, resource=resource,
                               counted=counted, method=method) -> Response:
                return await self._by_id(request, method, twin, handler, resource, counted)

            routes.append(Route(_pattern(twin), endpoint, methods=[method], name=f"{method} {twin}"))
        return routes

    async def _by_id(self, request: Request, method: str, template: str, handler: Handler[M],
                     resource: str, counted: bool) -> Response:
        repo = self.front.state.repo_by_id(int(request.path_params["repository_id"]))
        if repo is None:
            self.front.counters.add(method, template, 404, request.url.path)
            return self._json(404, {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"})
        request.scope["path_params"] = {**request.path_params, "owner": repo.owner, "repo": repo.name}
        return await self.handle(request, method, template, handler, resource, counted)

    async def handle(self, request: Request, method: str, template: str, handler: Handler[M],
                     resource: str, counted: bool, app_jwt: bool = False) -> Response:
        front = self.front
        fault = front.faults.take(method, request.url.path)
        if fault is not None:
            answer = await self._fault(request, fault, resource)
            if answer is not None and fault.rewrite is not None:
                answer = self._rewritten(answer, fault.rewrite)
            if answer is not None or fault.drop:
                front.counters.add(method, template, answer.status_code if answer else DROPPED, request.url.path)
                return answer or Response(status_code=499)
        # A request an injected rule matched is not also subject to chaos: rules take precedence.
        chaos = front.request_chaos.decide(request.url.path) if fault is None else None
        if chaos is not None:
            answer = await self._chaos(request, chaos, resource)
            if answer is not None:
                front.counters.add(method, template, answer.status_code, request.url.path)
                return answer
        token = token_of(request)
        actor = "app" if app_jwt else front.token_actor(token)
        if actor is None:
            front.counters.add(method, template, 401, request.url.path)
            return self._json(401, {"message": "Bad credentials",
                                    "documentation_url": "https://docs.github.com/rest"})
        params = request.path_params
        named = front.state.repos.get(f"{params.get('owner')}/{params.get('repo')}".lower())  # None: no repository
        # Any installation's token reads a public repository, as on GitHub (a PR's fork, read
        # through the base repository's installation); it writes only to its own owner's.
        public_read = method == "GET" and named is not None and not named.private
        if not app_jwt and not front.installations.admits(token, request.path_params.get("owner", ""),
                                                          public_read=public_read):
            # An installation token on a repository its installation does not reach: GitHub
            # answers 404, as for a repository that does not exist (but reads a public one).
            front.counters.add(method, template, 404, request.url.path)
            return self._json(404, {"message": "Not Found",
                                    "documentation_url": "https://docs.github.com/rest"})
        key = token or "anonymous"
        bucket = front.rate_limits.bucket(resource, key)
        if counted and bucket.remaining == 0:
            front.counters.add(method, template, 403, request.url.path)
            return self._json(403, {"message": f"API rate limit exceeded for {actor}.",
                                    "documentation_url": "https://docs.github.com/rest"},
                              front.rate_limits.headers(bucket, resource))
        try:
            reply = await handler(self.model, ApiRequest(request, actor, named.id if named is not None else None))
            status, data, headers = reply.status, reply.data, dict(reply.headers)
        except ApiError as e:
            status, data, headers = e.status, e.body(), dict(e.headers)
        except Exception:
            log.exception("simulator handler failed", route=f"{method} {template}")
            status, data, headers = 500, {"message": "Server Error"}, {}
        body = b"" if status == 204 else json.dumps(data).encode()
        media_type = JSON
        if fault is not None and fault.rewrite is not None:
            # Rewritten before the ETag is made, as a server sends what it tags: a revalidation
            # of the faithful answer is then answered with the rewritten one, not a 304.
            body, media_type = rewritten(fault.rewrite, body, media_type)
            if fault.rewrite == "next_loop":
                headers["Link"] = f'<{request.url}>; rel="next"'
        looping = fault is not None and fault.rewrite == "next_loop"
        # A looping page is not tagged: its body is the faithful one, and a cache that kept it
        # would give its bad link to the next revalidation too.
        if method == "GET" and status == 200 and not looping:
            headers["ETag"] = _etag(body)
            if _matches(request.headers.get("if-none-match"), headers["ETag"]):
                # A revalidation that hits costs nothing against the rate limit, as on GitHub.
                front.counters.add(method, template, 304, request.url.path)
                headers.update(front.rate_limits.headers(bucket, resource))
                return Response(status_code=304, headers=headers)
            headers["Cache-Control"] = "private, max-age=60, s-maxage=60"
        if counted:
            bucket = front.rate_limits.consume(resource, key)
        headers.update(front.rate_limits.headers(bucket, resource))
        if chaos is not None and chaos.may_lose_ack and status < 400 and \
                await self._is_write(request, method, resource):
            # The write happened (state, side effects, webhooks); only its answer is lost.
            front.request_chaos.counts["lost_ack"] += 1
            front.counters.add(method, template, 502, request.url.path)
            return self._json(502, {"message": "Bad Gateway"},
                              front.rate_limits.headers(bucket, resource))
        front.counters.add(method, template, status, request.url.path)
        if status == 204:
            return Response(status_code=204, headers=self._common(headers))
        return Response(body, status_code=status, headers=self._common(headers), media_type=media_type)

    @staticmethod
    async def _is_write(request: Request, method: str, resource: str) -> bool:
        if resource == "graphql":
            return is_mutation(await request.body())
        return method in WRITE_METHODS

    @staticmethod
    def _common(headers: dict[str, str]) -> dict[str, str]:
        return {"X-GitHub-Media-Type": "github.v3; format=json",
                "X-GitHub-Request-Id": uuid.uuid4().hex[:20].upper(),
                "X-GitHub-Api-Version-Selected": "2022-11-28", **headers}

    @staticmethod
    def _rewritten(answer: Response, kind: str) -> Response:
        """A fault's own answer (its `status`) with the body `kind` makes of it."""
        body, media_type = rewritten(kind, bytes(answer.body), answer.media_type or JSON)
        headers = {k: v for k, v in answer.headers.items() if k.lower() not in ("content-length", "content-type")}
        return Response(body, status_code=answer.status_code, headers=headers, media_type=media_type)

    def _json(self, status: int, data: dict, headers: dict[str, str] | None = None) -> Response:
        return Response(json.dumps(data).encode(), status_code=status,
                        headers=self._common(headers or {}), media_type=JSON)

    async def _fault(self, request: Request, fault: Fault, resource: str) -> Response | None:
        """The injected answer, or None to go on (a pure delay). A drop never answers."""
        if fault.delay > 0:
            await asyncio.sleep(fault.delay)
        if fault.drop:
            await self._hold(request)
            return None
        if fault.status is None:
            return None
        if fault.status in (403, 429):
            reset = int(time.time()) + fault.retry_after
            headers = {"Retry-After": str(fault.retry_after), "x-ratelimit-limit": "5000",
                       "x-ratelimit-remaining": "0", "x-ratelimit-reset": str(reset),
                       "x-ratelimit-used": "5000", "x-ratelimit-resource": resource}
            message = ("API rate limit exceeded" if fault.status == 403 else
                       "You have exceeded a secondary rate limit. Please wait a few minutes "
                       "before you try again.")
            return self._json(fault.status, {"message": message}, headers)
        messages = {401: "Bad credentials", 404: "Not Found", 405: "Method Not Allowed", 500: "Server Error", 502: "Bad Gateway",
                    503: "Service Unavailable"}
        return self._json(fault.status, {"message": messages[fault.status]})

    async def _chaos(self, request: Request, chaos: ChaosDecision,
                     resource: str) -> Response | None:
        """Pause if the chaos says so, then its fault answer, or None to handle the request."""
        if chaos.slow:
            await asyncio.sleep(chaos.slow)
        if chaos.status is None:
            return None
        bucket = self.front.rate_limits.bucket(resource, token_of(request) or "anonymous")
        status, data, headers = fault_answer(chaos,
                                             self.front.rate_limits.headers(bucket, resource))
        return self._json(status, data, headers)

    async def _hold(self, request: Request) -> None:
        """Keep the request open until the client disconnects (its timeout) or we shut down."""
        async def disconnected() -> None:
            while (await request.receive())["type"] != "http.disconnect":
                pass

        waiters = [asyncio.ensure_future(disconnected()),
                   asyncio.ensure_future(self.front.closing.wait())]
        try:
            await asyncio.wait(waiters, timeout=DROP_HOLD_SECONDS,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
