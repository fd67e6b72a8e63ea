"""How the GitHub client sends a request, whatever it asks: with the token of its repository's
installation, within a bound on concurrency and a deadline, held back while the rate limit is
spent, refused if it would write in a dry run, counted (a conditional read GitHub answers 304 is
free of rate limit), its failure turned into an error of `errors.py` (`failures.py`), and its
answer read as JSON and checked against the shape its endpoint reads (`answers.py`), so an
answer GitHub's API does not document is `Malformed`, never a traceback in a caller.
githubkit's own retries are off: a retry that sleeps inside a worker would hold unrelated PRs
hostage, so a rate limit surfaces as RateLimited and the job is re-scheduled. The endpoints
(`endpoints/`) are methods over this path; mutations on one PR are serialized (`mutating`)."""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import structlog
from githubkit import GitHub
from githubkit.exception import GitHubException
from graphql import FragmentDefinitionNode, GraphQLError, OperationDefinitionNode, OperationType
from graphql import parse as graphql_parse

from bot import metrics
from bot.github import shapes
from bot.github.answers import checked, decoded, malformed, unparsed
from bot.github.errors import GitHubError, NotFound, RateLimited, Unavailable
from bot.github.failures import minting_refused, translate
from bot.github.installations import (
    InstallationMap,
    InstallationsAuthStrategy,
    NotInstalled,
    chosen,
    repo_of_path,
)
from bot.github.ratebudget import InstallationBudgets, RateBudget
from bot.github.reach import GitHubReach
from bot.github.routes import request_of
from storage.locks import KeyedLocks

log = structlog.get_logger(__name__)


class ReadLog:
    """The GETs made inside `GitHubClient.tracking_reads()`, and how many were not modified."""

    __slots__ = ("reads", "unchanged")

    def __init__(self) -> None:
        self.reads = 0
        self.unchanged = 0

    @property
    def all_unchanged(self) -> bool:
        """Every read was answered from the HTTP cache after a 304 (and there was at least one):
        GitHub had nothing new since this process last read the same URLs."""
        return self.reads > 0 and self.unchanged == self.reads


_read_log: ContextVar[ReadLog | None] = ContextVar("convergebot_read_log", default=None)


def not_modified(raw: httpx.Response) -> bool:
    """The response is the cached one: GitHub answered 304 to its revalidation (githubkit asks
    hishel to revalidate every read, so a cached answer is never served unrevalidated)."""
    return bool(raw.extensions.get("hishel_from_cache"))


class DryRunRefused(GitHubError):
    """A write asked of the client while `github.dry_run` is on: a write path the dry run missed."""


# What the dry run lets through besides reads: a GraphQL document of queries only, and the App
# minting its installation token.
_TOKEN_MINT = re.compile(r"POST /app/installations/\d+/access_tokens")


def _queries_only(document: str) -> bool:
    """Whether a GraphQL document holds queries alone, as GraphQL itself reads it (commas,
    comments and strings included); one that does not parse is no query."""
    try:
        parsed = graphql_parse(document)
    except GraphQLError:
        return False
    return all(isinstance(d, OperationDefinitionNode) and d.operation is OperationType.QUERY
               or isinstance(d, FragmentDefinitionNode) for d in parsed.definitions)


def _flight(installation: int | None, resource: str) -> str:
    return resource if installation is None else f"{installation}:{resource}"


SECONDARY_BACKOFF_START = 60.0
SECONDARY_BACKOFF_CAP = 900.0


class Transport:
    """The request path every endpoint method takes (`_request`, `_json`, `_pages`, `_graphql`,
    `_as_app`), and what it keeps: the rate budgets, the installations, the requests counted."""

    def __init__(self, gh: GitHub, *, max_concurrency: int = 8, call_timeout: float = 40.0,
                 rate_budget: RateBudget | None = None):
        self.gh = gh
        # The installation's (token's) budget per resource, from every answer's x-ratelimit-*;
        # an App on several installations keeps one per installation (see ratebudget.py).
        self.rate_budget = rate_budget or (InstallationBudgets() if self.per_installation else RateBudget())
        self.installations = InstallationMap()  # repository -> installation, when per_installation
        self.installation_lookups = 0  # GET /repos/{o}/{r}/installation made
        self._lookups = KeyedLocks()
        self.call_timeout = call_timeout
        self._slots = asyncio.Semaphore(max_concurrency)
        self._pr_mutations = KeyedLocks()
        # Until when the credential's primary budget is spent; an App serving several
        # installations keeps it per installation (each has its own limit).
        self._exhausted_until: datetime | None = None
        self._installation_exhausted: dict[int, datetime] = {}
        self._secondary_strikes = 0
        # metered requests sent and not yet answered, per bucket (an installation's: "id:bucket")
        self._in_flight: Counter[str] = Counter()
        self.gets = 0  # every GET this client made, and those answered 304 (from the cache)
        self.gets_not_modified = 0
        self.reach = GitHubReach()  # answered? credentials taken? (for /readyz)

    # -- the rate limit ---------------------------------------------------------------------------

    def _rate_limited(self, err: RateLimited) -> RateLimited:
        """Fill in when to come back: what GitHub said, else exponential backoff (secondary)."""
        if not err.secondary:
            # The primary budget is the token's: no call can succeed before the reset, so
            # further calls fail fast here instead of spending requests on certain 403s.
            err.retry_at = err.retry_at or datetime.now(UTC) + timedelta(seconds=60)
            if (installation := chosen.get()) is None:
                self._exhausted_until = err.retry_at
            else:
                self._installation_exhausted[installation] = err.retry_at
        elif err.retry_at is None:
            wait = min(SECONDARY_BACKOFF_CAP, SECONDARY_BACKOFF_START * 2**self._secondary_strikes)
            self._secondary_strikes += 1
            err.retry_at = datetime.now(UTC) + timedelta(seconds=wait)
        return err

    def _observe(self, response: Any) -> None:
        """Record the rate-limit balance an answer reports (no request of its own)."""
        raw = getattr(response, "raw_response", None)
        if isinstance(raw, httpx.Response):
            self._budget().observe_headers(raw.headers, status=raw.status_code)

    def _budget(self) -> RateBudget:
        """The budget of the installation the request in this task goes to."""
        budget, installation = self.rate_budget, chosen.get()
        if isinstance(budget, InstallationBudgets) and installation is not None:
            return budget.of(installation)
        return budget

    def _spent(self, what: str, resource: str) -> RateLimited | None:
        """The refusal GitHub would answer, when the balance its last answer reported is already
        spent by the requests in flight: the call then waits for the reset without being sent (a
        refused request is one more strike against the token, and each is a 403 to log). Near
        zero this may hold back a conditional read GitHub would have answered 304, for free."""
        bucket = self._budget().bucket(resource)
        flying = self._in_flight[_flight(chosen.get(), resource)]
        if bucket is None or bucket.assumed or bucket.remaining - flying > 0:
            return None
        return RateLimited(f"{what}: rate limit spent ({resource} bucket, "
                           f"{bucket.remaining} left, {flying} in flight)",
                           datetime.fromtimestamp(bucket.reset, UTC), False)

    # -- dry run: the last line of defence against a write nobody meant to make -----------------

    # Set by the Runtime from `[github] dry_run`. Every write should have stopped at the outbox
    # or the fixer already; one that did not fails here, loudly, instead of reaching GitHub.
    dry_run = False

    def _refuse_in_dry_run(self, what: str, query: str | None = None) -> None:
        """Raise DryRunRefused for a write: any method but GET/HEAD, except the App's token
        minting (a read's credentials), and a GraphQL document with a mutation in it."""
        if not self.dry_run:
            return
        method = what.partition(" ")[0]
        if query is not None:
            if _queries_only(query):
                return
        elif method in ("GET", "HEAD") or _TOKEN_MINT.fullmatch(what):
            return
        log.warning("dry_run.refused", request=what)
        raise DryRunRefused(f"dry run: refused to send {what} (github.dry_run is on; no GitHub writes)")

    # -- one request ------------------------------------------------------------------------------

    async def _call(self, what: str, send, *, parse=None, metered: bool = True,
                    resource: str = "core") -> Any:
        """`send()`'s answer (or `parse(answer)`); `metered=False` for calls made with another
        identity's budget (the App's own JWT), which the installation's budget must not record.
        `resource`: the rate-limit bucket the call is charged to (GraphQL has its own)."""
        if not what.startswith("graphql "):
            self._refuse_in_dry_run(what)  # GraphQL is looked at in `_graphql`, with its document
        installation = chosen.get()
        until = self._exhausted_until if installation is None else self._installation_exhausted.get(installation)
        if until is not None:
            if datetime.now(UTC) < until:
                raise RateLimited(f"{what}: rate limit exhausted", until, False)
            if installation is None:
                self._exhausted_until = None
            else:
                del self._installation_exhausted[installation]
        async with self._slots:
            if metered and (refusal := self._spent(what, resource)) is not None:
                raise refusal
            self._in_flight[_flight(installation, resource)] += metered
            try:
                # Our own deadline: githubkit's HTTP cache layer (hishel) drops httpx's
                # per-request timeout, and a GitHub that never answers would hold a worker forever.
                async with asyncio.timeout(self.call_timeout):
                    result = await send()
                self.reach.answered(200)
                metrics.github_request(*request_of(what), result)
                if metered:
                    self._observe(result)
                if parse is not None:
                    try:
                        result = parse(result)
                    except ValueError as e:  # pydantic's, or JSON's: a body githubkit cannot read
                        raise unparsed(what, e, getattr(result, "status_code", None)) from None
            except TimeoutError:
                self.reach.unanswered()
                metrics.github_request(*request_of(what), "timeout")
                raise Unavailable(f"{what}: no answer within {self.call_timeout:.0f}s") from None
            except GitHubException as exc:
                metrics.github_request(*request_of(what), getattr(exc, "response", None))
                status = getattr(getattr(exc, "response", None), "status_code", None)
                if isinstance(status, int) and status < 500:
                    self.reach.answered(status)
                else:
                    self.reach.unanswered()
                if metered:
                    self._observe(getattr(exc, "response", None))
                err = translate(exc, what)
                if isinstance(err, RateLimited):
                    err = self._rate_limited(err)
                raise err from exc
            finally:
                self._in_flight[_flight(installation, resource)] -= metered
        self._secondary_strikes = 0
        return result

    @contextmanager
    def tracking_reads(self) -> Iterator[ReadLog]:
        """Count the GETs made inside (in this task) and how many GitHub answered 304."""
        log_ = ReadLog()
        token = _read_log.set(log_)
        try:
            yield log_
        finally:
            _read_log.reset(token)

    # -- installations (an App configured without installation_id) ---------------------------

    @property
    def per_installation(self) -> bool:
        """A GitHub App with no installation configured: each repository's installation is
        looked up, and each request sent with that installation's token."""
        return isinstance(self.gh.auth, InstallationsAuthStrategy)

    async def installation_for(self, owner: str, repo: str) -> int:
        """The id of the App's installation on the repository: looked up once as the App, then
        kept (a 401 or 404 from it makes a later request look again, see installations.py).
        NotInstalled when the App is not installed there."""
        full = f"{owner}/{repo}"
        if (found := self.installations.get(full)) is not None:
            return found
        async with self._lookups.hold(full.lower()):  # concurrent first requests: one lookup
            if (found := self.installations.get(full)) is not None:
                return found
            if self.installations.missing(full):
                raise NotInstalled(full)
            path = f"/repos/{owner}/{repo}/installation"
            try:
                raw = await self._as_app("GET", path)
            except NotFound:
                self.installations.not_installed(full)
                raise NotInstalled(full) from None
            self.installation_lookups += 1
            found = int(checked(f"GET {path}", decoded(f"GET {path}", raw), shapes.Installation)["id"])
            self.installations.learn(full, found)
            log.info("github.installation", repo=full, installation_id=found)
            return found

    @contextmanager
    def for_installation(self, installation_id: int | None) -> Iterator[None]:
        """Send the requests made inside (in this task) that name no repository (GET
        /installation/repositories, /rate_limit) with this installation's token."""
        token = chosen.set(installation_id)
        try:
            yield
        finally:
            chosen.reset(token)

    async def _choose(self, what: str, repo: str | None) -> int | None:
        """The installation a request for `repo` goes to (None: the one configured credential)."""
        if not self.per_installation:
            return None
        if repo is None:
            if (current := chosen.get()) is None:
                raise GitHubError(f"{what}: names no repository, and the App serves several installations")
            return current
        owner, _, name = repo.partition("/")
        return await self.installation_for(owner, name)

    async def _as_installation_of(self, what: str, repo: str | None, send, *, foreign: bool = False,
                                  **kw: Any) -> Any:
        """`self._call(what, send, ...)` with the token of `repo`'s installation. `foreign`: the
        request is for another repository (a fork's branch), whose 404 says nothing about
        `repo`'s installation; only a refused token does."""
        installation = await self._choose(what, repo)
        if installation is None:
            return await self._call(what, send, **kw)
        token = chosen.set(installation)
        try:
            return await self._call(what, send, **kw)
        except GitHubError as e:
            minting = minting_refused(e)
            refused = e.status == 401 or minting in (401, 404)
            if (repo is not None and (refused or (isinstance(e, NotFound) and not foreign))
                    and self.installations.doubt(repo, refused=refused)):
                log.info("github.installation_doubted", repo=repo, installation_id=installation,
                         status=minting or e.status)
            raise
        finally:
            chosen.reset(token)

    async def _as_app(self, method: str, url: str, **kw: Any) -> httpx.Response:
        """A request as the App itself (its JWT), not on an installation's budget."""
        async with self.gh.with_auth(self.gh.auth.as_app()) as app:
            resp = await self._call(f"{method} {url}", lambda: app.arequest(method, url, **kw),
                                    metered=False)
        return resp.raw_response

    # -- the request path of the endpoints --------------------------------------------------------

    async def _request(self, method: str, url: str, *, repo: str | None = None, **kw: Any) -> httpx.Response:
        """`repo` (owner/repo): the repository whose installation's token is sent, when it is not
        the one `url` names: a `Link: rel="next"` page (GitHub's `/repositories/{id}/...` names
        none), or a fork's branch read through the PR's base repository."""
        reads = _read_log.get() if method == "GET" else None
        if reads is not None:
            reads.reads += 1  # counted before the call: a read that fails is no "unchanged"
        named = repo_of_path(url)
        foreign = repo is not None and named is not None and named.lower() != repo.lower()
        resp = await self._as_installation_of(f"{method} {url}", repo or named,
                                              lambda: self.gh.arequest(method, url, **kw), foreign=foreign)
        raw = resp.raw_response
        if method == "GET":
            cached = not_modified(raw)
            self.gets += 1
            self.gets_not_modified += cached
            if reads is not None:
                reads.unchanged += cached
        return raw

    async def _graphql(self, what: str, query: str, variables: dict, *, shape: Any = None,
                       repo: str | None = None) -> dict:
        """The answer's `data`, checked against `shape` (`shapes.py`) when given. `repo`: the
        repository the request is for (its installation's token is sent), when the variables do
        not name it as `owner` and `name`."""
        # The answer itself (not githubkit's parsed data) so its rate-limit headers are seen;
        # `_arequest` + `parse_graphql_response` is what `async_graphql` does (githubkit 0.16).
        gql = self.gh.graphql
        self._refuse_in_dry_run(f"graphql {what}", query)
        if repo is None and "owner" in variables and "name" in variables:
            repo = f"{variables['owner']}/{variables['name']}"
        data = await self._as_installation_of(f"graphql {what}", repo, lambda: gql._arequest(query, variables),
                                              parse=gql.parse_graphql_response, resource="graphql")
        return data if shape is None else checked(f"graphql {what}", data, shape)

    async def _json(self, method: str, url: str, *, shape: Any = None, **kw: Any) -> Any:
        """The answer's JSON (None for an empty body), checked against `shape` (`shapes.py`)
        when given: then an empty body is as malformed as a wrong one."""
        raw = await self._request(method, url, **kw)
        what = f"{method} {url}"
        if not raw.content:
            if shape is None:
                return None
            raise malformed(what, "no body", raw.status_code)
        data = decoded(what, raw)
        return data if shape is None else checked(what, data, shape, raw.status_code)

    async def _pages(self, url: str, params: dict | None = None, *, shape: Any,
                     max_pages: int | None = None) -> list[Any]:
        """Every page (the first `max_pages`, when given), following the absolute
        `Link: rel="next"` GitHub sends, each page checked against `shape` (`shapes.py`: a list
        of items, or the object wrapping one). Its next links name the repository by id
        (`/repositories/8514/...`), not by name: every page goes to the installation of the
        repository the first URL names."""
        items: list[Any] = []
        next_url: str | None = url
        repo = repo_of_path(url)
        query: dict[str, Any] | None = {"per_page": 100, **(params or {})}
        pages = 0
        read: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
        while next_url and (max_pages is None or pages < max_pages):
            pages += 1
            raw = await self._request("GET", next_url, repo=repo, params=query)
            read.add(_page_of(raw.request.url))
            page = checked(f"GET {next_url}", decoded(f"GET {next_url}", raw), shape)
            items.extend(page if isinstance(page, list) else [page])
            next_url = raw.links.get("next", {}).get("url")
            if next_url is not None and _page_of(httpx.URL(next_url)) in read:
                # A next link back to a page read already would be followed for ever.
                raise malformed(f"GET {url}", "a next link to a page already read")
            query = None  # the next link carries the query already
        return items

    @asynccontextmanager
    async def mutating(self, pr_key: str) -> AsyncIterator[None]:
        """Mutations on one PR are serial; different PRs proceed in parallel."""
        async with self._pr_mutations.hold(pr_key):
            yield


def _page_of(url: httpx.URL) -> tuple[str, tuple[tuple[str, str], ...]]:
    """Which page a URL asks for, however its query is spelled (`:` or `%3A`, in any order)."""
    return url.path, tuple(sorted(url.params.multi_items()))
